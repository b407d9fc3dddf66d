package stripetest_test

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// searchAnswer is the search_result envelope, or the error, as sent on the wire.
type searchAnswer struct {
	status   int
	Object   string           `json:"object"`
	Data     []map[string]any `json:"data"`
	HasMore  bool             `json:"has_more"`
	NextPage *string          `json:"next_page"`
	URL      string           `json:"url"`
	Error    *struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Param   string `json:"param"`
		Message string `json:"message"`
	} `json:"error"`
}

func search(t *testing.T, srv *stripetest.Server, params url.Values) searchAnswer {
	t.Helper()
	var a searchAnswer
	a.status = apiGet(t, srv, "/v1/payment_intents/search?"+params.Encode(), &a)
	return a
}

func ids(a searchAnswer) []string {
	var out []string
	for _, pi := range a.Data {
		out = append(out, pi["id"].(string))
	}
	return out
}

// charge creates a succeeded PaymentIntent with metadata md and returns its id.
func charge(t *testing.T, b *bundle, amount int64, md map[string]string) string {
	t.Helper()
	p := &stripe.PaymentIntentParams{Amount: stripe.Int64(amount), Currency: stripe.String("usd"),
		PaymentMethod: stripe.String(stripetest.PaymentMethodVisa), Confirm: stripe.Bool(true)}
	for k, v := range md {
		p.AddMetadata(k, v)
	}
	pi, err := b.sc.PaymentIntents.New(p)
	if err != nil {
		t.Fatal(err)
	}
	return pi.ID
}

func TestSearchShapeAndLag(t *testing.T) {
	t.Parallel()
	b := setup(t, &stripetest.Config{SearchLag: time.Minute})
	id := charge(t, b, 500, map[string]string{"payonce_key": "order-1"})
	q := url.Values{"query": {"metadata['payonce_key']:'order-1'"}}

	for _, d := range []time.Duration{0, 59 * time.Second} {
		b.clock.Advance(d)
		a := search(t, b.srv, q)
		if a.status != 200 || a.Object != "search_result" || a.URL != "/v1/payment_intents/search" ||
			a.HasMore || a.NextPage != nil || a.Data == nil || len(a.Data) != 0 {
			t.Fatalf("within the lag: %+v", a)
		}
	}
	b.clock.Advance(time.Second)
	a := search(t, b.srv, q)
	if a.status != 200 || !slices.Equal(ids(a), []string{id}) || a.Data[0]["object"] != "payment_intent" ||
		a.Data[0]["amount"] != 500.0 {
		t.Fatalf("after the lag: %+v", a)
	}
	// A later PaymentIntent is not visible while the first one is.
	later := charge(t, b, 700, map[string]string{"payonce_key": "order-1"})
	if got := ids(search(t, b.srv, q)); !slices.Equal(got, []string{id}) {
		t.Fatalf("fresh PaymentIntent visible at once: %v", got)
	}
	b.clock.Advance(time.Minute)
	if got := ids(search(t, b.srv, q)); !slices.Equal(got, []string{later, id}) {
		t.Fatalf("want newest first %v, got %v", []string{later, id}, got)
	}

	// Through stripe-go's search iterator.
	it := b.sc.PaymentIntents.Search(&stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: q.Get("query")}})
	var got []string
	for it.Next() {
		got = append(got, it.PaymentIntent().ID)
	}
	if it.Err() != nil || !slices.Equal(got, []string{later, id}) {
		t.Fatalf("stripe-go search: %v %v", got, it.Err())
	}
}

func TestSearchQueries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a1 := charge(t, b, 100, map[string]string{"k": "a", "tenant": "x"})
	a2 := charge(t, b, 200, map[string]string{"k": "A", "tenant": "y"})
	bq := charge(t, b, 300, map[string]string{"k": "b'q\\z", "tenant": "x"})
	_, err := b.sc.PaymentIntents.New(chargeParams("", 400, stripetest.PaymentMethodDeclined))
	dID := stripeErr(t, err).PaymentIntent.ID

	for _, tc := range []struct {
		query string
		want  []string // newest first
	}{
		{`metadata['k']:'a'`, []string{a2, a1}}, // exact but case-insensitive, as at Stripe
		{`metadata["k"]:"a" AND metadata['tenant']:'x'`, []string{a1}},
		{`metadata['k']:'a' and metadata['tenant']:'y'`, []string{a2}},
		{`metadata['k']:'a' metadata['tenant']:'x'`, []string{a1}}, // a space means AND
		{`metadata['k']:'a' OR metadata['tenant']:'x'`, []string{bq, a2, a1}},
		{`metadata['k']:'b\'q\\z'`, []string{bq}},
		{`metadata['k']:'b'`, nil},
		{`metadata['tenant']:'x' AND -metadata['k']:'a'`, []string{bq}},
		{`status:'requires_payment_method'`, []string{dID}},
		{`status:'succeeded' AND amount>=200`, []string{bq, a2}},
		{`amount<200 currency:'USD'`, []string{a1}},
		{`metadata['missing']:'a'`, nil},
	} {
		a := search(t, b.srv, url.Values{"query": {tc.query}})
		if a.status != 200 || !slices.Equal(ids(a), tc.want) {
			t.Fatalf("%s: got %v (%d %+v), want %v", tc.query, ids(a), a.status, a.Error, tc.want)
		}
	}
}

func TestSearchPagination(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var want []string
	for i := range 5 {
		want = append([]string{charge(t, b, int64(100+i), map[string]string{"batch": "1"})}, want...)
	}
	charge(t, b, 999, map[string]string{"batch": "2"})

	var got []string
	params := url.Values{"query": {"metadata['batch']:'1'"}, "limit": {"2"}}
	for pages := 1; ; pages++ {
		a := search(t, b.srv, params)
		if a.status != 200 || len(a.Data) > 2 || a.HasMore != (a.NextPage != nil) {
			t.Fatalf("page %d: %+v", pages, a)
		}
		got = append(got, ids(a)...)
		if !a.HasMore {
			if pages != 3 {
				t.Fatalf("%d pages, want 3", pages)
			}
			break
		}
		params.Set("page", *a.NextPage)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages gave %v, want %v", got, want)
	}
}

func TestSearchBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		params      url.Values
		param, code string
		msgContains string
	}{
		{url.Values{}, "query", "parameter_missing", "query"},
		{url.Values{"query": {""}}, "query", "", "empty"},
		{url.Values{"query": {"metadata['k']"}}, "query", "", "operator"},
		{url.Values{"query": {"metadata['k':'v'"}}, "query", "", "]"},
		{url.Values{"query": {"metadata[k]:'v'"}}, "query", "", "quoted"},
		{url.Values{"query": {"metadata['k']:'v"}}, "query", "", "unterminated"},
		{url.Values{"query": {"metadata['k']:v"}}, "query", "", "must be quoted"},
		{url.Values{"query": {"metadata['a']:'1' AND metadata['b']:'2' OR metadata['c']:'3'"}}, "query", "", "AND and OR"},
		{url.Values{"query": {"metadata['a']:'1' AND"}}, "query", "", "ends after"},
		// An unescaped quote ends the value early: what follows is no clause (no injection).
		{url.Values{"query": {"metadata['k']:'a'' OR status:'succeeded'"}}, "query", "", "field name"},
		{url.Values{"query": {"email:'a@b.c'"}}, "query", "", `"email"`},
		{url.Values{"query": {"metadata['k']~'v'"}}, "query", "", "~"},
		{url.Values{"query": {"status>'x'"}}, "query", "", "numeric"},
		{url.Values{"query": {"amount>ten"}}, "query", "", "integer"},
		{url.Values{"query": {"metadata['k']:'v'"}, "limit": {"0"}}, "limit", "parameter_invalid_integer", "between 1 and 100"},
		{url.Values{"query": {"metadata['k']:'v'"}, "limit": {"101"}}, "limit", "parameter_invalid_integer", "between 1 and 100"},
		{url.Values{"query": {"metadata['k']:'v'"}, "page": {"bogus"}}, "page", "parameter_invalid_string", "bogus"},
	} {
		a := search(t, b.srv, tc.params)
		if a.status != 400 || a.Error == nil || a.Error.Type != "invalid_request_error" || a.Error.Param != tc.param ||
			a.Error.Code != tc.code || !strings.Contains(a.Error.Message, tc.msgContains) {
			t.Fatalf("%v: status %d error %+v, want 400 invalid_request_error param %q code %q message containing %q",
				tc.params, a.status, a.Error, tc.param, tc.code, tc.msgContains)
		}
	}

	// stripe-go surfaces it as a *stripe.Error.
	it := b.sc.PaymentIntents.Search(&stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: "nope"}})
	for it.Next() {
	}
	if se := stripeErr(t, it.Err()); se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeInvalidRequest || se.Param != "query" {
		t.Fatalf("stripe-go: %+v", se)
	}
	// GET /v1/payment_intents/{id} still routes.
	if _, err := b.sc.PaymentIntents.Get("pi_missing", nil); stripeErr(t, err).HTTPStatusCode != 404 {
		t.Fatalf("get by id: %v", err)
	}
}

func TestSearchLagMustNotBeNegative(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := fmt.Sprint(recover()); !strings.Contains(r, "Config.SearchLag") {
			t.Fatalf("panic %q does not name Config.SearchLag", r)
		}
	}()
	stripetest.NewUnstartedServer(&stripetest.Config{SearchLag: -time.Second})
}
