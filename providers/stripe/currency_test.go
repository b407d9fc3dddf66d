package stripe_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

func amt(s string, c money.Currency) money.Money { return money.MustParse(s, c) }

// Stripe's integer amounts follow https://docs.stripe.com/currencies, not
// ISO 4217: ToAmount and FromAmount are each other's inverse on every
// amount Stripe can represent.
func TestToAmountAndBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m    money.Money
		want int64
	}{
		{amt("10.50", money.EUR), 1050},
		{amt("500", money.JPY), 500},
		{amt("1000", money.KRW), 1000},
		{amt("1.230", money.KWD), 1230},
		{amt("0.010", money.BHD), 10},
		{amt("5000", "ISK"), 500000}, // zero-decimal in ISO, two decimals (always 00) at Stripe
		{amt("5", "UGX"), 500},       // likewise
		{amt("100", "MGA"), 100},     // two-decimal in ISO, zero-decimal at Stripe
		{amt("10.45", "HUF"), 1045},  // HUF and TWD: whole units for payouts only
		{amt("800.45", "TWD"), 80045},
		{amt("12.34", "IQD"), 1234}, // not one of Stripe's three-decimal currencies: two decimals
	} {
		got, err := paystripe.ToAmount(tc.m)
		if err != nil || got != tc.want {
			t.Fatalf("ToAmount(%s) = %d, %v; want %d", tc.m, got, err, tc.want)
		}
		back, err := paystripe.FromAmount(got, strings.ToLower(string(tc.m.Currency())))
		if err != nil || !back.Equal(tc.m) {
			t.Fatalf("FromAmount(%d, %s) = %s, %v; want %s", got, tc.m.Currency(), back, err, tc.m)
		}
	}
}

func TestToAmountRefusesWhatStripeCannotRepresent(t *testing.T) {
	t.Parallel()
	for _, m := range []money.Money{
		amt("1.235", money.KWD), // three-decimal: the last digit must be 0
		amt("0.005", money.BHD),
		amt("10.50", "MGA"), // zero-decimal at Stripe
		amt("1.234", "IQD"), // two decimals at Stripe
		{},                  // no currency
	} {
		_, err := paystripe.ToAmount(m)
		ie := errAs[*provider.InvalidRequestError](t, err)
		if ie.Param != "Amount" || idempotency.SafeToRetry(err) {
			t.Fatalf("ToAmount(%s): %+v", m, ie)
		}
	}
	for _, tc := range []struct {
		amount   int64
		currency string
	}{
		{500050, "isk"}, // a fractional krona, as Stripe took them before 2023
		{100, "zzz"},
	} {
		if m, err := paystripe.FromAmount(tc.amount, tc.currency); err == nil {
			t.Fatalf("FromAmount(%d, %s) = %s, want an error", tc.amount, tc.currency, m)
		}
	}
}

// Charges, refunds, lookups, totals and webhook events carry Stripe's
// units end to end, through stripe-go against the fake, whose own table
// reads them back.
func TestAmountsInStripeUnits(t *testing.T) {
	t.Parallel()
	b, ep := setupEndpoint(t, verifier(t, []string{stripetest.DefaultWebhookSecret}, 0), stripetest.Config{})
	ctx := context.Background()
	from := time.Now().Add(-time.Minute)

	for _, tc := range []struct {
		m     money.Money
		sent  int64
		fakes string // the fake's reading of what it received
	}{
		{amt("5000", "ISK"), 500000, "5000.00"},
		{amt("1.230", money.KWD), 1230, "1.230"},
		{amt("500", money.JPY), 500, "500"},
		{amt("10.50", money.EUR), 1050, "10.50"},
	} {
		cur := strings.ToLower(string(tc.m.Currency()))
		t.Run(cur, func(t *testing.T) {
			key := "order-" + cur
			req := chargeReq(key, stripetest.PaymentMethodVisa)
			req.Amount = tc.m
			ch := must(b.p.Charge(ctx, req))(t)
			if !ch.Amount.Equal(tc.m) || ch.Status != provider.ChargeSucceeded {
				t.Fatalf("charge: %+v", ch)
			}
			got := b.srv.Totals()[cur].Succeeded
			if got != tc.sent || stripetest.FormatAmount(got, cur) != tc.fakes {
				t.Fatalf("the fake received %d (%s), want %d (%s)", got, stripetest.FormatAmount(got, cur), tc.sent, tc.fakes)
			}
			found := must(b.p.Lookup(ctx, provider.LookupRequest{Key: key, From: from, WithRefunds: true}))(t)
			if len(found.Charges) != 1 || !found.Charges[0].Amount.Equal(tc.m) || !found.Charges[0].Refunded.IsZero() {
				t.Fatalf("lookup: %+v", found)
			}
		})
	}

	// A partial ISK refund: 1000 ISK is sent as 100000.
	isk := must(b.p.Lookup(ctx, provider.LookupRequest{Key: "order-isk", From: from}))(t).Charges[0]
	re := must(b.p.Refund(ctx, provider.RefundRequest{Key: "order-isk-refund",
		ProviderKey: provider.DeriveKey("order-isk-refund", "refund", 1, paystripe.MaxProviderKeyLen),
		ChargeID:    isk.ProviderID, Amount: amt("1000", "ISK")}))(t)
	if !re.Amount.Equal(amt("1000", "ISK")) || b.srv.Totals()["isk"].Refunded != 100000 {
		t.Fatalf("refund %+v, the fake holds %+v", re, b.srv.Totals()["isk"])
	}
	refunds := must(b.p.LookupRefund(ctx, provider.RefundLookupRequest{Key: "order-isk-refund", ChargeID: isk.ProviderID}))(t)
	if len(refunds.Refunds) != 1 || !refunds.Refunds[0].Amount.Equal(amt("1000", "ISK")) {
		t.Fatalf("refund lookup: %+v", refunds)
	}
	withRefunds := must(b.p.Lookup(ctx, provider.LookupRequest{Key: "order-isk", From: from, WithRefunds: true}))(t)
	if !withRefunds.Charges[0].Refunded.Equal(amt("1000", "ISK")) {
		t.Fatalf("lookup with refunds: %+v", withRefunds.Charges[0])
	}

	totals := must(b.p.Totals(ctx, from, time.Now().Add(time.Minute)))(t)
	if got := totals["ISK"]; !got.Charged.Equal(amt("5000", "ISK")) || !got.Refunded.Equal(amt("1000", "ISK")) {
		t.Fatalf("ISK totals %+v", got)
	}
	if got := totals[money.KWD]; !got.Charged.Equal(amt("1.230", money.KWD)) {
		t.Fatalf("KWD totals %+v", got)
	}

	events, errs := ep.drain(t, b)
	if len(errs) != 0 {
		t.Fatalf("deliveries refused: %v", errs)
	}
	want := map[string]money.Money{
		"payment_intent.succeeded order-isk": amt("5000", "ISK"),
		"payment_intent.succeeded order-kwd": amt("1.230", money.KWD),
		"payment_intent.succeeded order-jpy": amt("500", money.JPY),
		"payment_intent.succeeded order-eur": amt("10.50", money.EUR),
		"charge.refunded order-isk":          amt("1000", "ISK"),
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for _, e := range events {
		if w, ok := want[e.Type+" "+e.Key]; !ok || !e.Amount.Equal(w) {
			t.Fatalf("event %s %s: amount %s, want %s", e.Type, e.Key, e.Amount, w)
		}
	}
}

// An amount Stripe cannot represent is refused before anything is sent:
// by ValidateCharge (payments asks it before recording the intent), by
// Charge and by Refund. The fake never sees the request.
func TestUnrepresentableAmountsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	for _, m := range []money.Money{amt("1.235", money.KWD), amt("10.50", "MGA"), amt("0.001", "OMR")} {
		req := chargeReq("order-"+string(m.Currency()), stripetest.PaymentMethodVisa)
		req.Amount = m
		for name, err := range map[string]error{
			"ValidateCharge": b.p.ValidateCharge(req),
			"Charge":         second(b.p.Charge(ctx, req)),
		} {
			ie := errAs[*provider.InvalidRequestError](t, err)
			if ie.Param != "Amount" || !strings.Contains(ie.Message, m.String()) || idempotency.SafeToRetry(err) {
				t.Fatalf("%s %s: %+v", name, m, ie)
			}
		}
		wantCount(t, b, req.ProviderKey, 0, 0)
	}

	req := chargeReq("order-kwd", stripetest.PaymentMethodVisa)
	req.Amount = amt("1.230", money.KWD)
	if err := b.p.ValidateCharge(req); err != nil {
		t.Fatalf("ValidateCharge of %s: %v", req.Amount, err)
	}
	if len(b.srv.Totals()) != 0 {
		t.Fatalf("ValidateCharge sent something: %+v", b.srv.Totals())
	}
	ch := must(b.p.Charge(ctx, req))(t)
	refundKey := provider.DeriveKey("order-kwd-refund", "refund", 1, paystripe.MaxProviderKeyLen)
	_, err := b.p.Refund(ctx, provider.RefundRequest{Key: "order-kwd-refund", ProviderKey: refundKey,
		ChargeID: ch.ProviderID, Amount: amt("0.615", money.KWD)})
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "Amount" {
		t.Fatalf("refund of 0.615 KWD: %+v", ie)
	}
	wantCount(t, b, refundKey, 0, 0)
	if got := b.srv.Totals()["kwd"]; got != (stripetest.Total{Succeeded: 1230, Net: 1230}) {
		t.Fatalf("the fake holds %+v", got)
	}
}

func second[T any](_ T, err error) error { return err }

// Stripe answers a request whose key another request is still executing
// with 409 and the code idempotency_key_in_use; its type is not
// documented (observed: invalid_request_error). Whatever the type, through
// stripe-go, the adapter reports it in progress: retry later, same key.
func TestChargeKeyInUseIsInProgressWhateverItsType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body string }{
		{"invalid_request_error", `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"There is currently another in-progress request using this Idempotent Key"}}`},
		{"idempotency_error", `{"error":{"type":"idempotency_error","code":"idempotency_key_in_use","message":"in progress"}}`},
		{"no type", `{"error":{"code":"idempotency_key_in_use","message":"in progress"}}`},
		{"409 without a code", `{"error":{"type":"invalid_request_error","message":"conflict"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(hs.Close)
			p := must(paystripe.New(&paystripe.Config{SecretKey: "sk_test_x", BaseURL: hs.URL,
				HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}))(t)
			_, err := p.Charge(context.Background(), chargeReq("order-409", stripetest.PaymentMethodVisa))
			errAs[*provider.InProgressError](t, err)
			if !idempotency.SafeToRetry(err) || errors.Is(err, provider.ErrInvalidRequest) || calls.Load() != 1 {
				t.Fatalf("%v (calls %d): want a retryable in-progress error, sent once", err, calls.Load())
			}
		})
	}
}

// Against the fake, whose 409 carries invalid_request_error: a request
// colliding with one in flight is in progress, and once the first
// completed the same key replays its answer (the collision was not
// cached).
func TestChargeCollisionThenReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-collide", stripetest.PaymentMethodVisa)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.Latency, Delay: time.Hour, IdempotencyKey: req.ProviderKey})
	first := make(chan error, 1)
	go func() { _, err := b.p.Charge(context.Background(), req); first <- err }()

	// The first request holds the key until released; the second
	// collides with it.
	if err := b.srv.WaitHeld(testkit.Ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	_, err := b.p.Charge(context.Background(), req)
	if !errors.As(err, new(*provider.InProgressError)) {
		t.Fatalf("the collision: %v, want in progress", err)
	}
	b.srv.EndLatency()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	again := must(b.p.Charge(context.Background(), req))(t)
	if !again.Replayed || again.Status != provider.ChargeSucceeded {
		t.Fatalf("after the collision: %+v", again)
	}
	wantCount(t, b, req.ProviderKey, 1, 0)
}
