package stripetest_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// refundIDs lists the refunds through stripe-go's iterator (every page) with params.
func refundIDs(t *testing.T, b *bundle, params *stripe.RefundListParams) (ids, statuses []string) {
	t.Helper()
	it := b.sc.Refunds.List(params)
	for it.Next() {
		ids = append(ids, it.Refund().ID)
		statuses = append(statuses, string(it.Refund().Status))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return ids, statuses
}

// GET /v1/refunds filters by PaymentIntent or charge, newest first, paginates with
// starting_after through stripe-go's iterator, and shows a failed refund as failed.
func TestListRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pi1 := must(b.sc.PaymentIntents.New(chargeParams("c1", 1000, stripetest.PaymentMethodVisa)))(t)
	pi2 := must(b.sc.PaymentIntents.New(chargeParams("c2", 1000, stripetest.PaymentMethodVisa)))(t)
	var own []string
	for i, key := range []string{"r1", "r2", "r3"} {
		own = append(own, must(b.sc.Refunds.New(refundParams(pi1.ID, key, int64(100*(i+1)))))(t).ID)
	}
	other := must(b.sc.Refunds.New(refundParams(pi2.ID, "r4", 50)))(t).ID
	if err := b.srv.FailRefund(own[1]); err != nil {
		t.Fatal(err)
	}

	params := &stripe.RefundListParams{PaymentIntent: stripe.String(pi1.ID)}
	params.Limit = stripe.Int64(2) // two pages
	ids, statuses := refundIDs(t, b, params)
	newestFirst := []string{own[2], own[1], own[0]}
	if !slices.Equal(ids, newestFirst) || !slices.Equal(statuses, []string{"succeeded", "failed", "succeeded"}) {
		t.Fatalf("refunds of %s: %v %v, want %v with the middle one failed", pi1.ID, ids, statuses, newestFirst)
	}
	ids, _ = refundIDs(t, b, &stripe.RefundListParams{Charge: stripe.String(pi2.LatestCharge.ID)})
	if !slices.Equal(ids, []string{other}) {
		t.Fatalf("refunds of charge %s: %v, want [%s]", pi2.LatestCharge.ID, ids, other)
	}
	ids, _ = refundIDs(t, b, &stripe.RefundListParams{})
	if len(ids) != 4 || ids[0] != other {
		t.Fatalf("all refunds: %v, want 4, newest %s first", ids, other)
	}
	ids, _ = refundIDs(t, b, &stripe.RefundListParams{PaymentIntent: stripe.String("pi_unknown")})
	if len(ids) != 0 {
		t.Fatalf("refunds of an unknown PaymentIntent: %v", ids)
	}

	// The failed refund's amount is refundable again, and no longer counts as refunded.
	if _, err := b.sc.Refunds.New(refundParams(pi1.ID, "r5", 1000-100-300)); err != nil {
		t.Fatalf("refunding what the failed refund gave back: %v", err)
	}
	if got := b.srv.Totals()["usd"]; got.Refunded != 100+300+50+600 {
		t.Fatalf("totals %+v, want refunded %d", got, 100+300+50+600)
	}
	if err := b.srv.FailRefund(own[1]); err == nil || !strings.Contains(err.Error(), "not succeeded") {
		t.Fatalf("failing a failed refund: %v", err)
	}
	if err := b.srv.FailRefund("re_unknown"); err == nil || !strings.Contains(err.Error(), "no refund") {
		t.Fatalf("failing an unknown refund: %v", err)
	}
}

// The list envelope and Stripe's 400 on a bad limit or an unknown cursor, over raw HTTP.
func TestListRefundsShapeAndBadParams(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pi := must(b.sc.PaymentIntents.New(chargeParams("c1", 1000, stripetest.PaymentMethodVisa)))(t)
	re := must(b.sc.Refunds.New(refundParams(pi.ID, "r1", 100)))(t)

	get := func(q url.Values) (int, map[string]any) {
		t.Helper()
		var body map[string]any
		code := apiGet(t, b.srv, "/v1/refunds?"+q.Encode(), &body)
		return code, body
	}
	code, body := get(url.Values{"payment_intent": {pi.ID}, "limit": {"1"}})
	data, _ := body["data"].([]any)
	if code != http.StatusOK || body["object"] != "list" || body["url"] != "/v1/refunds" || body["has_more"] != false || len(data) != 1 {
		t.Fatalf("list: %d %v", code, body)
	}
	if first := data[0].(map[string]any); first["id"] != re.ID || first["status"] != "succeeded" || first["payment_intent"] != pi.ID {
		t.Fatalf("refund in the list: %v", first)
	}
	for _, bad := range []string{"0", "101", "x"} {
		code, body := get(url.Values{"limit": {bad}})
		e, _ := body["error"].(map[string]any)
		if code != http.StatusBadRequest || e["code"] != "parameter_invalid_integer" || e["param"] != "limit" {
			t.Fatalf("limit %s: %d %v", bad, code, body)
		}
	}
	code, body = get(url.Values{"starting_after": {"re_unknown"}})
	if e, _ := body["error"].(map[string]any); code != http.StatusBadRequest || e["code"] != "resource_missing" || e["param"] != "starting_after" {
		t.Fatalf("unknown starting_after: %d %v", code, body)
	}
}

func must[T any](v T, err error) func(*testing.T) T { return testkit.Must(v, err) }
