package payments_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// booksBalanced fails the test unless every currency's postings sum to
// zero over the whole ledger.
func booksBalanced(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var unbalanced int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT currency FROM ledger_postings
		GROUP BY currency HAVING sum(amount) <> 0) u`).Scan(&unbalanced); err != nil {
		t.Fatal(err)
	}
	if unbalanced != 0 {
		t.Fatalf("the books do not balance in %d currencies", unbalanced)
	}
}

// stripeNet is the fake's net of succeeded PaymentIntents less refunds, in
// cents of EUR: what the ledger's provider cash must hold.
func stripeNet(b whBundle) int64 { return b.fake.Totals()["eur"].Net }

// redeliver posts every event the fake emitted again, signed now, n times
// at once each: a provider's resends.
func (b whBundle) redeliver(t *testing.T, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, ev := range b.fake.Events() {
		for range n {
			wg.Go(func() {
				if code := b.signed(t, string(ev.Payload), stripetest.DefaultWebhookSecret); code != http.StatusOK {
					t.Errorf("redelivery of %s (%s): %d", ev.ID, ev.Type, code)
				}
			})
		}
	}
	wg.Wait()
}

// A Stripe PaymentIntent declined, then confirmed again by the customer
// with another card (its decline returned it to requires_payment_method):
// the success books the charge once, the key's record answers the
// success instead of the decline, and the event is recorded as
// succeeded_after_decline for the reconciler's report. The decline's own
// notification is lost: the synchronous decline alone names the declined
// PaymentIntent. The success is delivered three times, then every event
// five times more at once (the decline's, now stale, among them).
func TestStripeSuccessAfterDeclineIsBooked(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 2)
	ctx := context.Background()
	p := params(t, "sad", "30.00", stripetest.PaymentMethodDeclined)
	var decline *provider.DeclineError
	b.drop.Store(true)
	if _, err := b.client.Charge(ctx, p); !errors.As(err, &decline) {
		t.Fatalf("charge: %v, want a decline", err)
	}
	b.waitDeliveries(t)
	b.drop.Store(false)
	pi := b.fake.Events()[0].ObjectID
	if in, err := b.client.Intent(ctx, "cus_1", "sad"); err != nil || in.Status != payments.IntentDeclined || in.ProviderID != pi {
		t.Fatalf("intent after the decline: %+v %v, want DECLINED naming %s", in, err, pi)
	}
	if _, err := b.client.Charge(ctx, p); !errors.As(err, &decline) {
		t.Fatalf("retry before the success: %v, want the decline replayed", err)
	}

	if st, err := b.fake.ConfirmPaymentIntent(pi, stripetest.PaymentMethodVisa); err != nil || st != "succeeded" {
		t.Fatalf("the customer's confirmation: %s %v", st, err)
	}
	b.waitDeliveries(t)
	b.redeliver(t, 5)

	in, err := b.client.Intent(ctx, "cus_1", "sad")
	if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != pi {
		t.Fatalf("intent after the success: %+v %v, want SUCCEEDED %s", in, err, pi)
	}
	if n := entries(t, b.bundle, "sad"); n != 1 || balance(t, b.bundle) != "30.00" || stripeNet(b) != 3000 {
		t.Fatalf("%d ledger entries, cash %s, Stripe's net %d; want 1, 30.00, 3000", n, balance(t, b.bundle), stripeNet(b))
	}
	booksBalanced(t, b.pool)
	if got := b.outcomes(t); got[payments.EventSucceededAfterDecline] != 1 || got[payments.EventStale] != 1 || len(got) != 2 {
		t.Fatalf("stored events %v, want the success booked and the late failure stale, once each", got)
	}
	var detail string
	if err := b.pool.QueryRow(ctx, `SELECT detail FROM webhook_events WHERE outcome = $1`, payments.EventSucceededAfterDecline).Scan(&detail); err != nil ||
		!strings.Contains(detail, pi) {
		t.Fatalf("the event's detail %q %v does not name %s", detail, err, pi)
	}
	for range 2 {
		out, err := b.client.Charge(ctx, p)
		if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != pi || !out.Replayed || out.Amount != "30.00" {
			t.Fatalf("retry of the key after the success: %+v %v, want the success replayed", out, err)
		}
	}
	if n := pis(t, b.bundle, "sad"); n != 1 || entries(t, b.bundle, "sad") != 1 {
		t.Fatalf("%d PaymentIntents, %d entries after the retries; want 1 and 1", n, entries(t, b.bundle, "sad"))
	}
}

// The decline came by webhook while the key's record was still in
// progress (the charge's answer was lost): the success supersedes the
// record in progress, and the retry replays the success.
func TestStripeSuccessAfterWebhookDeclineSupersedesTheOpenRecord(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	ctx := context.Background()
	b.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	p := params(t, "sad2", "12.00", stripetest.PaymentMethodInsufficientFunds)
	if _, err := b.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost answer: %v", err)
	}
	b.waitDeliveries(t)
	pi := b.fake.Events()[0].ObjectID
	if in, err := b.client.Intent(ctx, "cus_1", "sad2"); err != nil || in.Status != payments.IntentDeclined || in.ProviderID != pi {
		t.Fatalf("intent after the failure webhook: %+v %v", in, err)
	}
	if _, err := b.fake.ConfirmPaymentIntent(pi, stripetest.PaymentMethodVisa); err != nil {
		t.Fatal(err)
	}
	b.waitDeliveries(t)
	out, err := b.client.Charge(ctx, p)
	if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != pi || !out.Replayed {
		t.Fatalf("retry after the success: %+v %v, want the success replayed from the superseded record", out, err)
	}
	if n := entries(t, b.bundle, "sad2"); n != 1 || balance(t, b.bundle) != "12.00" || stripeNet(b) != 1200 || pis(t, b.bundle, "sad2") != 1 {
		t.Fatalf("%d entries, cash %s, net %d, %d PaymentIntents", n, balance(t, b.bundle), stripeNet(b), pis(t, b.bundle, "sad2"))
	}
	booksBalanced(t, b.pool)
}

// A Stripe refund that succeeded and failed afterwards (a closed card):
// its entry is reversed by an entry of its own, its reservation on the
// charge released, the refund intent FAILED with Stripe's reason; a retry
// of its key answers the failure and refunds nothing, and a new refund of
// the full amount under a new key succeeds. Each event is delivered three
// times, then all of them five times more at once.
func TestStripeRefundFailedAfterSuccessIsReversed(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 2)
	ctx := context.Background()
	if _, err := b.client.Charge(ctx, params(t, "rfc", "20.00", stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	rp := payments.RefundParams{Scope: "cus_1", Key: "rf1", ChargeKey: "rfc", Amount: eur(t, "20.00")}
	rf, err := b.client.Refund(ctx, rp)
	if err != nil || rf.Status != payments.IntentSucceeded {
		t.Fatalf("refund: %+v %v", rf, err)
	}
	b.waitDeliveries(t)
	var inv *provider.InvalidRequestError
	if _, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "rf-early", ChargeKey: "rfc", Amount: eur(t, "20.00")}); !errors.As(err, &inv) ||
		inv.Code != "refund_exceeds_charge" {
		t.Fatalf("a second refund while the first stands: %v, want refund_exceeds_charge", err)
	}

	if err := b.fake.FailRefund(rf.ProviderID); err != nil {
		t.Fatal(err)
	}
	b.waitDeliveries(t)
	b.redeliver(t, 5)

	var status, reason, reserved string
	if err := b.pool.QueryRow(ctx, `SELECT r.status, coalesce(r.decline_code, ''), c.refund_reserved::text
		FROM payment_intents r JOIN payment_intents c ON c.idempotency_key = r.charge_key AND c.user_id = r.user_id
		WHERE r.client_key = 'rf1' AND r.kind = 'REFUND'`).Scan(&status, &reason, &reserved); err != nil {
		t.Fatal(err)
	}
	if status != string(payments.IntentFailed) || reason != "expired_or_canceled_card" || reserved != "0.00" {
		t.Fatalf("refund intent %s (%q), charge reserved %s; want FAILED with Stripe's reason, 0.00 reserved", status, reason, reserved)
	}
	var steps []string
	rows, err := b.pool.Query(ctx, `SELECT step FROM ledger_entries WHERE key = $1 ORDER BY id`, composed(t, "refund", "rf1"))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, s)
	}
	rows.Close()
	if strings.Join(steps, ",") != ledger.StepRefund+","+ledger.StepRefundReversal {
		t.Fatalf("the refund's entries: %v, want its refund and one reversal", steps)
	}
	if balance(t, b.bundle) != "20.00" || stripeNet(b) != 2000 {
		t.Fatalf("cash %s, Stripe's net %d; want 20.00 and 2000 (nothing refunded)", balance(t, b.bundle), stripeNet(b))
	}
	booksBalanced(t, b.pool)
	if got := b.outcomes(t); got[payments.EventRefundFailedAfterSuccess] != 1 {
		t.Fatalf("stored events %v, want the failure reversed once", got)
	}

	// The failed refund's key answers the failure; it refunds nothing.
	again, err := b.client.Refund(ctx, rp)
	if err != nil || again.Status != payments.IntentFailed || !again.Replayed || again.ProviderID != rf.ProviderID {
		t.Fatalf("retry of the failed refund's key: %+v %v, want FAILED replayed", again, err)
	}
	// A new refund of the whole amount, under a new key.
	rf2, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "rf2", ChargeKey: "rfc", Amount: eur(t, "20.00")})
	if err != nil || rf2.Status != payments.IntentSucceeded || rf2.ProviderID == rf.ProviderID {
		t.Fatalf("a new refund after the failure: %+v %v", rf2, err)
	}
	b.waitDeliveries(t)
	if got := b.fake.Totals()["eur"]; got.Refunded != 2000 || got.Net != 0 || balance(t, b.bundle) != "0.00" {
		t.Fatalf("after the new refund: Stripe %+v, cash %s; want 2000 refunded, net 0, cash 0.00", got, balance(t, b.bundle))
	}
	booksBalanced(t, b.pool)
}

// adyenRecoded is it as Adyen would send it under another event code,
// signed with the fake's key.
func adyenRecoded(t testing.TB, it adyentest.NotificationItem, eventCode, reason string) adyentest.NotificationItem {
	t.Helper()
	it.EventCode = eventCode
	return adyenResigned(t, it, "true", reason)
}

// Adyen's REFUND_FAILED (the card scheme rejected a refund Adyen had
// accepted) for a refund payonce recorded SUCCEEDED: reversed once, its
// reservation released, whatever the resends; REFUNDED_REVERSED for an
// already failed refund changes nothing more.
func TestAdyenRefundFailedAfterSuccessIsReversed(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 0)
	ctx := context.Background()
	if ch, err := r.client.Charge(ctx, pvParams(t, "adyen", "arc", "10.00")); err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", ch, err)
	}
	rp := payments.RefundParams{Scope: "cus_1", Key: "arf", ChargeKey: "arc", Amount: pvEUR(t, "10.00")}
	rf, err := r.client.Refund(ctx, rp)
	if err != nil || rf.Status != payments.IntentPending {
		t.Fatalf("refund: %+v %v", rf, err)
	}
	r.wait(t)
	if in, err := r.client.RefundIntent(ctx, "cus_1", "arf"); err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("refund intent after REFUND: %+v %v", in, err)
	}
	failed := adyenRecoded(t, adyenItem(t, r.fakes.Adyen, "REFUND", rf.ProviderID), "REFUND_FAILED", "Refund rejected by card scheme")
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if code, body := r.in.post(t, nil, adyenDelivery(t, failed)); code != http.StatusOK {
				t.Errorf("REFUND_FAILED: %d %s", code, body)
			}
		})
	}
	wg.Wait()
	reversed := adyenRecoded(t, adyenItem(t, r.fakes.Adyen, "REFUND", rf.ProviderID), "REFUNDED_REVERSED", "")
	if code, body := r.in.post(t, nil, adyenDelivery(t, reversed)); code != http.StatusOK {
		t.Fatalf("REFUNDED_REVERSED: %d %s", code, body)
	}
	if in, err := r.client.RefundIntent(ctx, "cus_1", "arf"); err != nil || in.Status != payments.IntentFailed {
		t.Fatalf("refund intent after REFUND_FAILED: %+v %v, want FAILED", in, err)
	}
	if e, p := pvEntries(t, r.pool, composed(t, "refund", "arf")); e != 2 || p != 4 {
		t.Fatalf("refund: %d entries with %d postings, want the refund and its reversal", e, p)
	}
	if got := r.cash(t); got != "10.00" {
		t.Fatalf("ledger provider cash %s, want 10.00", got)
	}
	booksBalanced(t, r.pool)
	got := r.eventOutcomes(t)
	if got[rf.ProviderID+":REFUND_FAILED:true"] != payments.EventRefundFailedAfterSuccess ||
		got[rf.ProviderID+":REFUNDED_REVERSED:true"] != payments.EventConfirmed {
		t.Fatalf("stored events %v", got)
	}
	again, err := r.client.Refund(ctx, rp)
	if err != nil || again.Status != payments.IntentFailed || !again.Replayed {
		t.Fatalf("retry of the failed refund's key: %+v %v, want FAILED replayed", again, err)
	}
	// The reservation is free again: payonce accepts a new refund of the
	// whole amount (Adyen's fake, which cannot fail a refund, refuses it).
	r.in.drop.Store(true)
	if rf2, err := r.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "arf2", ChargeKey: "arc", Amount: pvEUR(t, "10.00")}); err != nil ||
		rf2.Status != payments.IntentPending {
		t.Fatalf("a new refund after the failure: %+v %v, want it sent (PENDING)", rf2, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.fakes.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}
}

// A success is never overwritten by a stale answer of the same attempt:
// the synchronous call got Stripe's decline, and before it recorded it the
// customer confirmed the PaymentIntent again with another card and the
// success webhook settled the open intent (the decline's own notification
// was lost). The call then records the success, not the decline: the
// intent stays SUCCEEDED with its one ledger entry, and the caller and
// every retry get the success.
func TestStaleDeclineNeverOverwritesASuccess(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	ctx := context.Background()
	p := params(t, "stale-decline", "21.00", stripetest.PaymentMethodDeclined)
	var pi string
	b.drop.Store(true)
	payments.SetCrashHooks(b.client, payments.CrashHooks{AfterProvider: func(context.Context, string) {
		b.waitDeliveries(t) // the decline's notification, dropped
		b.drop.Store(false)
		pi = b.fake.Events()[0].ObjectID
		if st, err := b.fake.ConfirmPaymentIntent(pi, stripetest.PaymentMethodVisa); err != nil || st != "succeeded" {
			t.Errorf("the customer's confirmation: %s %v", st, err)
		}
		b.waitDeliveries(t)
	}})
	out, err := b.client.Charge(ctx, p)
	if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != pi {
		t.Fatalf("the call whose decline went stale: %+v %v, want the success", out, err)
	}
	payments.SetCrashHooks(b.client, payments.CrashHooks{})
	if in, err := b.client.Intent(ctx, "cus_1", "stale-decline"); err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != pi {
		t.Fatalf("intent: %+v %v, want SUCCEEDED %s", in, err, pi)
	}
	if n := entries(t, b.bundle, "stale-decline"); n != 1 || stripeNet(b) != 2100 {
		t.Fatalf("%d ledger entries, Stripe's net %d; want 1 and 2100", n, stripeNet(b))
	}
	booksBalanced(t, b.pool)
	if out, err := b.client.Charge(ctx, p); err != nil || out.Status != payments.IntentSucceeded || !out.Replayed {
		t.Fatalf("retry: %+v %v, want the success replayed", out, err)
	}
}
