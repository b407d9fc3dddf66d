package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// Webhooks of Adyen and PayPal through payments' receiver
// (Client.WebhookHandler), with the fakes delivering to an httptest server:
// lost responses settled by notifications, storms of the same delivery,
// events out of order, notifications racing the synchronous commit,
// Adyen's asynchronous refunds, and refused deliveries.

// pvDelivery is one delivery the fake made: its headers and body.
type pvDelivery struct {
	header http.Header
	body   []byte
}

// pvInbox fronts the receiver: it records every delivery of the fake and,
// while drop is set, answers it 200 without handling it (the webhook that
// never came). Deliveries posted by the test go to /direct: handled, not
// recorded.
type pvInbox struct {
	srv     *httptest.Server
	handler atomic.Pointer[http.Handler]
	drop    atomic.Bool
	mu      sync.Mutex
	got     []pvDelivery
}

func newInbox(t *testing.T) *pvInbox {
	in := &pvInbox{}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/direct" {
			body, _ := io.ReadAll(r.Body)
			in.mu.Lock()
			in.got = append(in.got, pvDelivery{header: r.Header.Clone(), body: body})
			in.mu.Unlock()
			if in.drop.Load() {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		(*in.handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(in.srv.Close)
	return in
}

func (in *pvInbox) deliveries() []pvDelivery {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]pvDelivery(nil), in.got...)
}

// post sends a delivery to the receiver; it returns the status and body.
func (in *pvInbox) post(t *testing.T, header http.Header, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, in.srv.URL+"/direct", bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	maps.Copy(req.Header, header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// pvRig is a client on one provider's fake whose webhooks reach the
// client's receiver through an inbox.
type pvRig struct {
	provider string
	pool     *pgxpool.Pool
	client   *payments.Client
	ledger   *ledger.Ledger
	prov     provider.Provider
	fakes    *fakes.Set
	in       *pvInbox
}

func pvWebhookRig(t *testing.T, provider string, dup int) pvRig {
	t.Helper()
	return pvWebhookRigWith(t, provider, dup, nil)
}

// pvWebhookRigWith is pvWebhookRig whose adapter sends through the
// transport rt makes (nil: the default).
func pvWebhookRigWith(t *testing.T, provider string, dup int, rt func(*fakes.Set) http.RoundTripper) pvRig {
	t.Helper()
	pool := pgtest.Pool(t)
	in := newInbox(t)
	s := pvFakes(t, provider, in.srv.URL, dup)
	var tr http.RoundTripper
	if rt != nil {
		tr = rt(s)
	}
	prov := pvProvider(t, provider, pvURL(s), noKeepAliveClient(tr))
	c, l := pvClient(t, pool, prov, 2*time.Second)
	h, err := c.WebhookHandler(provider, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.handler.Store(&h)
	return pvRig{provider: provider, pool: pool, client: c, ledger: l, prov: prov, fakes: s, in: in}
}

func (r pvRig) wait(t testing.TB) {
	t.Helper()
	waitDeliveries(t, r.fakes)
}

// outcomes counts the stored events of the rig's provider by outcome.
func (r pvRig) outcomes(t testing.TB) map[string]int {
	t.Helper()
	return outcomeCounts(t, r.pool, r.provider)
}

// eventOutcomes maps each stored event id to its outcome.
func (r pvRig) eventOutcomes(t testing.TB) map[string]string {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), `SELECT event_id, outcome FROM webhook_events WHERE provider = $1`, r.provider)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, o string
		if err := rows.Scan(&id, &o); err != nil {
			t.Fatal(err)
		}
		out[id] = o
	}
	return out
}

func (r pvRig) cash(t testing.TB) string {
	t.Helper()
	return balanceOf(t, r.ledger, ledger.ProviderCash(r.provider))
}

// loseCharge makes a charge whose response is lost after the provider
// acted (at PayPal, the create's: a create with a payment source captures
// at once): the intent is left UNKNOWN.
func (r pvRig) loseCharge(t *testing.T, key, amount string) payments.ChargeParams {
	t.Helper()
	if r.fakes.Adyen != nil {
		r.fakes.Adyen.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
	} else {
		r.fakes.PayPal.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: "/v2/checkout/orders"})
	}
	p := pvParams(t, r.provider, key, amount)
	if _, err := r.client.Charge(context.Background(), p); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v, want an unknown outcome", err)
	}
	return p
}

// adyenDelivery is the body of a delivery of items, as Adyen sends it.
func adyenDelivery(t testing.TB, items ...adyentest.NotificationItem) []byte {
	t.Helper()
	n := adyentest.Notification{Live: "false"}
	for _, it := range items {
		n.NotificationItems = append(n.NotificationItems, adyentest.NotificationEntry{NotificationRequestItem: it})
	}
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// adyenItem finds the item the fake emitted for (eventCode, pspReference).
func adyenItem(t testing.TB, s *adyentest.Server, eventCode, psp string) adyentest.NotificationItem {
	t.Helper()
	for _, ev := range s.Events() {
		if ev.Item.EventCode == eventCode && ev.Item.PSPReference == psp {
			return ev.Item
		}
	}
	t.Fatalf("the fake emitted no %s for %s", eventCode, psp)
	return adyentest.NotificationItem{}
}

// adyenResigned is it with success flipped (and reason set), signed again
// with the fake's key: what Adyen would send for the other outcome.
func adyenResigned(t testing.TB, it adyentest.NotificationItem, success, reason string) adyentest.NotificationItem {
	t.Helper()
	it.AdditionalData = maps.Clone(it.AdditionalData)
	if it.AdditionalData == nil {
		it.AdditionalData = map[string]string{}
	}
	it.Success, it.Reason = success, reason
	sig, err := adyentest.Sign(it, adyentest.DefaultHMACKey)
	if err != nil {
		t.Fatal(err)
	}
	it.AdditionalData["hmacSignature"] = sig
	return it
}

// paypalDelivery finds a recorded delivery of the PayPal event of type typ.
func paypalDelivery(t testing.TB, r pvRig, typ string) (pvDelivery, string) {
	t.Helper()
	for _, d := range r.in.deliveries() {
		var ev struct {
			ID        string `json:"id"`
			EventType string `json:"event_type"`
		}
		if json.Unmarshal(d.body, &ev) == nil && ev.EventType == typ {
			return d, ev.ID
		}
	}
	t.Fatalf("no %s delivery recorded", typ)
	return pvDelivery{}, ""
}

// A lost response leaves the intent UNKNOWN; the provider's notification,
// delivered 5 times, settles it once; the client's retry then answers the
// settled state.
func TestWebhookSettlesALostResponseAdyenPayPal(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"adyen", "paypal"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			r := pvWebhookRig(t, provider, 4)
			ctx := context.Background()
			p := r.loseCharge(t, "w1", "25.00")
			r.wait(t)
			if n := len(r.in.deliveries()); n != 5 {
				t.Fatalf("%d deliveries, want 5", n)
			}
			in, err := r.client.Intent(ctx, "cus_1", "w1")
			if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID == "" {
				t.Fatalf("intent after the webhook: %+v %v", in, err)
			}
			if got := r.outcomes(t); got[payments.EventApplied] != 1 || len(got) != 1 {
				t.Fatalf("stored events %v, want one applied (the 4 redeliveries change nothing)", got)
			}
			if e, _ := pvEntries(t, r.pool, composed(t, "charge", "w1")); e != 1 {
				t.Fatalf("%d ledger entries after the webhook, want 1", e)
			}
			out, err := r.client.Charge(ctx, p)
			if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != in.ProviderID {
				t.Fatalf("retry after the webhook: %+v %v", out, err)
			}
			pvCheckOneCharge(t, r.pool, r.client, r.fakes, provider, "w1", in.ProviderID, 2500)
			if got := r.cash(t); got != "25.00" {
				t.Fatalf("ledger provider cash %s, want 25.00", got)
			}
		})
	}
}

// The notification arrives while the synchronous call has the provider's
// answer but has not committed it: one posting, whoever commits first.
func TestWebhookBeforeTheSynchronousCommitAdyenPayPal(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"adyen", "paypal"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			r := pvWebhookRig(t, provider, 0)
			payments.SetCrashHooks(r.client, payments.CrashHooks{AfterProvider: func(context.Context, string) { r.wait(t) }})
			out, err := r.client.Charge(context.Background(), pvParams(t, provider, "w2", "9.99"))
			if err != nil || out.Status != payments.IntentSucceeded || out.Replayed {
				t.Fatalf("charge: %+v %v", out, err)
			}
			if got := r.outcomes(t); got[payments.EventApplied] != 1 || len(got) != 1 {
				t.Fatalf("the webhook did not settle first: %v", got)
			}
			pvCheckOneCharge(t, r.pool, r.client, r.fakes, provider, "w2", out.ProviderID, 999)
			if got := r.cash(t); got != "9.99" {
				t.Fatalf("ledger provider cash %s, want 9.99", got)
			}
		})
	}
}

// The same real delivery posted 5 times at once is stored once and has one
// effect.
func TestWebhookStormAdyenPayPal(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"adyen", "paypal"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			r := pvWebhookRig(t, provider, 0)
			ctx := context.Background()
			r.in.drop.Store(true)
			p := r.loseCharge(t, "w3", "40.00")
			r.wait(t)
			r.in.drop.Store(false)
			if in, err := r.client.Intent(ctx, "cus_1", "w3"); err != nil || in.Status != payments.IntentUnknown {
				t.Fatalf("intent before the storm: %+v %v", in, err)
			}
			ds := r.in.deliveries()
			if len(ds) != 1 {
				t.Fatalf("%d deliveries recorded, want 1", len(ds))
			}
			d := ds[0]
			type answer struct {
				code int
				body string
			}
			answers := make(chan answer, 5)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := 0; i < 5; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					code, body := r.in.post(t, d.header, d.body)
					answers <- answer{code, body}
				}()
			}
			close(start)
			wg.Wait()
			close(answers)
			for a := range answers {
				if a.code != http.StatusOK {
					t.Fatalf("a concurrent delivery got %d %s, want 200", a.code, a.body)
				}
				if provider == "adyen" && a.body != "[accepted]" {
					t.Fatalf("Adyen's acknowledgement: %q, want [accepted]", a.body)
				}
			}
			if got := r.outcomes(t); got[payments.EventApplied] != 1 || len(got) != 1 {
				t.Fatalf("stored events %v, want exactly one, applied", got)
			}
			in, err := r.client.Intent(ctx, "cus_1", "w3")
			if err != nil || in.Status != payments.IntentSucceeded {
				t.Fatalf("intent after the storm: %+v %v", in, err)
			}
			if e, _ := pvEntries(t, r.pool, composed(t, "charge", "w3")); e != 1 {
				t.Fatalf("%d ledger entries after the storm, want 1", e)
			}
			out, err := r.client.Charge(ctx, p)
			if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != in.ProviderID {
				t.Fatalf("retry after the storm: %+v %v", out, err)
			}
			pvCheckOneCharge(t, r.pool, r.client, r.fakes, provider, "w3", in.ProviderID, 4000)
		})
	}
}

// Adyen's notifications out of order: a REFUND before the AUTHORISATION,
// the REFUND's success=false after its success=true, a late AUTHORISATION
// after the synchronous settle, a failed AUTHORISATION after the success.
// Nothing moves backwards and nothing is posted twice.
func TestAdyenWebhooksOutOfOrder(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 0)
	ctx := context.Background()
	r.in.drop.Store(true)
	ch, err := r.client.Charge(ctx, pvParams(t, "adyen", "c1", "20.00"))
	if err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", ch, err)
	}
	rf, err := r.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "5.00")})
	if err != nil || rf.Status != payments.IntentPending || rf.ProviderID == "" {
		t.Fatalf("refund: %+v %v, want PENDING (Adyen only acknowledges)", rf, err)
	}
	r.wait(t)
	r.in.drop.Store(false)
	auth := adyenItem(t, r.fakes.Adyen, "AUTHORISATION", ch.ProviderID)
	refund := adyenItem(t, r.fakes.Adyen, "REFUND", rf.ProviderID)
	if refund.Success != "true" {
		t.Fatalf("the fake's refund failed: %+v", refund)
	}
	send := func(it adyentest.NotificationItem) {
		t.Helper()
		if code, body := r.in.post(t, nil, adyenDelivery(t, it)); code != http.StatusOK {
			t.Fatalf("delivery of %s %s success=%s: %d %s", it.EventCode, it.PSPReference, it.Success, code, body)
		}
	}
	send(refund)
	send(adyenResigned(t, refund, "false", "Refund failed later"))
	send(auth)
	send(adyenResigned(t, auth, "false", "Refused"))

	want := map[string]string{
		rf.ProviderID + ":REFUND:true":         payments.EventApplied,
		rf.ProviderID + ":REFUND:false":        payments.EventConflict,
		ch.ProviderID + ":AUTHORISATION:true":  payments.EventConfirmed,
		ch.ProviderID + ":AUTHORISATION:false": payments.EventStale,
	}
	if got := r.eventOutcomes(t); !maps.Equal(got, want) {
		t.Fatalf("stored events %v, want %v", got, want)
	}
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r1"); err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("refund intent: %+v %v, want SUCCEEDED", in, err)
	}
	pvCheckOneCharge(t, r.pool, r.client, r.fakes, "adyen", "c1", ch.ProviderID, 1500)
	if e, p := pvEntries(t, r.pool, composed(t, "refund", "r1")); e != 1 || p != 2 {
		t.Fatalf("refund: %d ledger entries with %d postings, want 1 with 2", e, p)
	}
	if got := r.cash(t); got != "15.00" {
		t.Fatalf("ledger provider cash %s, want 15.00", got)
	}
}

// Adyen only acknowledges a refund: Refund answers PENDING, and the REFUND
// notification settles the refund intent and posts it, once.
func TestAdyenRefundSettledByWebhook(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 2)
	ctx := context.Background()
	ch, err := r.client.Charge(ctx, pvParams(t, "adyen", "c2", "10.00"))
	if err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", ch, err)
	}
	rp := payments.RefundParams{Scope: "cus_1", Key: "r2", ChargeKey: "c2", Amount: pvEUR(t, "4.00")}
	rf, err := r.client.Refund(ctx, rp)
	if err != nil || rf.Status != payments.IntentPending || rf.ProviderID == "" {
		t.Fatalf("refund: %+v %v, want PENDING", rf, err)
	}
	r.wait(t)
	in, err := r.client.RefundIntent(ctx, "cus_1", "r2")
	if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != rf.ProviderID {
		t.Fatalf("refund intent after the REFUND notification: %+v %v", in, err)
	}
	if e, p := pvEntries(t, r.pool, composed(t, "refund", "r2")); e != 1 || p != 2 {
		t.Fatalf("refund: %d ledger entries with %d postings, want 1 with 2", e, p)
	}
	// A retry of the refund's key sends nothing new to Adyen.
	again, err := r.client.Refund(ctx, rp)
	if err != nil || again.ProviderID != rf.ProviderID {
		t.Fatalf("refund retry: %+v %v", again, err)
	}
	t.Logf("refund retry after the notification settled it: %+v", again)
	refKey := provider.DeriveKey(composed(t, "refund", "r2"), "refund", 0, adyen.MaxReferenceLen)
	if n := r.fakes.Adyen.Counts(refKey).Refunds; n != 1 {
		t.Fatalf("%d refunds at Adyen, want 1", n)
	}
	if got := r.cash(t); got != "6.00" {
		t.Fatalf("ledger provider cash %s, want 6.00", got)
	}
	if got := r.fakes.Net("adyen")["EUR"]; got != 600 {
		t.Fatalf("Adyen net %d, want 600", got)
	}
	if got := r.outcomes(t); got[payments.EventApplied]+got[payments.EventConfirmed] != 2 || len(got) > 2 {
		t.Fatalf("stored events %v, want the AUTHORISATION and the REFUND once each", got)
	}
}

// A REFUND success=false releases the refund's reservation on the charge:
// before it, nothing more can be refunded; after it, a new refund of the
// same amount is accepted.
func TestAdyenRefundFailureReleasesTheReservation(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 0)
	ctx := context.Background()
	ch, err := r.client.Charge(ctx, pvParams(t, "adyen", "c3", "10.00"))
	if err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", ch, err)
	}
	// 6.00 refunded in Adyen's Customer Area, outside payonce: Adyen will
	// refuse a refund of more than the 4.00 left.
	amt := adyen.Amount{Currency: "EUR", Value: 600}
	if _, err := r.prov.(*adyen.Provider).Client().Refund(ctx, ch.ProviderID,
		adyen.ModificationRequest{Amount: amt, Reference: "manual_refund_1"}, "manual_refund_1"); err != nil {
		t.Fatal(err)
	}
	r.wait(t)

	refund := func(key, amount string) (payments.Outcome, error) {
		return r.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: key, ChargeKey: "c3", Amount: pvEUR(t, amount)})
	}
	r.in.drop.Store(true)
	r1, err := refund("r1", "10.00")
	if err != nil || r1.Status != payments.IntentPending {
		t.Fatalf("refund r1: %+v %v, want PENDING", r1, err)
	}
	r.wait(t)
	r.in.drop.Store(false)
	// (errors.Is ErrRefundExceedsCharge would be the documented check:
	// see TestRefundExceedsChargeIsItsSentinel.)
	var inv *provider.InvalidRequestError
	if _, err := refund("r2", "0.01"); !errors.As(err, &inv) || inv.Code != "refund_exceeds_charge" {
		t.Fatalf("refund while r1 is reserved: %v, want refund_exceeds_charge", err)
	}
	failed := adyenItem(t, r.fakes.Adyen, "REFUND", r1.ProviderID)
	if failed.Success != "false" {
		t.Fatalf("the fake accepted the refund r1: %+v", failed)
	}
	// The REFUND false, delivered 5 times at once: the reservation is
	// released once.
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := r.in.post(t, nil, adyenDelivery(t, failed)); code != http.StatusOK {
				t.Errorf("REFUND false: %d %s", code, body)
			}
		}()
	}
	wg.Wait()
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r1"); err != nil || in.Status != payments.IntentFailed {
		t.Fatalf("refund intent r1: %+v %v, want FAILED", in, err)
	}
	r.in.drop.Store(true)
	r3, err := refund("r3", "10.00")
	if err != nil || r3.Status != payments.IntentPending {
		t.Fatalf("refund of the same amount after the failure: %+v %v, want accepted (PENDING)", r3, err)
	}
	r.wait(t) // Adyen refuses it too: 4.00 left
	r.in.drop.Store(false)
	// Released once, not five times: r3's 10.00 fills the charge again.
	if _, err := refund("r3b", "0.01"); !errors.As(err, &inv) || inv.Code != "refund_exceeds_charge" {
		t.Fatalf("refund while r3 is reserved: %v, want refund_exceeds_charge", err)
	}
	if code, body := r.in.post(t, nil, adyenDelivery(t, adyenItem(t, r.fakes.Adyen, "REFUND", r3.ProviderID))); code != http.StatusOK {
		t.Fatalf("REFUND false of r3: %d %s", code, body)
	}
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r3"); err != nil || in.Status != payments.IntentFailed {
		t.Fatalf("refund intent r3: %+v %v, want FAILED", in, err)
	}
	r4, err := refund("r4", "4.00")
	if err != nil || r4.Status != payments.IntentPending {
		t.Fatalf("refund r4: %+v %v", r4, err)
	}
	r.wait(t)
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r4"); err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("refund intent r4: %+v %v, want SUCCEEDED", in, err)
	}
	for key, want := range map[string]int{"r1": 0, "r2": 0, "r3": 0, "r3b": 0, "r4": 1} {
		if e, _ := pvEntries(t, r.pool, composed(t, "refund", key)); e != want {
			t.Errorf("refund %s: %d ledger entries, want %d", key, e, want)
		}
	}
	got := r.eventOutcomes(t)
	for id, want := range map[string]string{
		r1.ProviderID + ":REFUND:false": payments.EventApplied,
		r3.ProviderID + ":REFUND:false": payments.EventApplied,
		r4.ProviderID + ":REFUND:true":  payments.EventApplied,
	} {
		if got[id] != want {
			t.Errorf("event %s: %q, want %q (all: %v)", id, got[id], want, got)
		}
	}
	// The ledger knows the 4.00 refunded through payonce; the Customer
	// Area's 6.00 is the reconciler's business.
	if got := r.cash(t); got != "6.00" {
		t.Fatalf("ledger provider cash %s, want 6.00", got)
	}
	if got := r.fakes.Net("adyen")["EUR"]; got != 0 {
		t.Fatalf("Adyen net %d, want 0", got)
	}
}

// Adyen caches a 500 produced after the payment: every retry with the key
// gets it again. Once the AUTHORISATION notification settled the intent, a
// retry answers SUCCEEDED without asking Adyen.
func TestAdyenCached500SettledByWebhook(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 0)
	ctx := context.Background()
	r.in.drop.Store(true)
	r.fakes.Adyen.Inject(adyentest.Fault{Kind: adyentest.FailAfter, Path: "/payments"})
	p := pvParams(t, "adyen", "w5", "15.00")
	if _, err := r.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("500 after the payment: %v", err)
	}
	r.wait(t)
	if _, err := r.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("retry of a cached 500 before any notification: %v, want still unknown", err)
	}
	r.in.drop.Store(false)
	ds := r.in.deliveries()
	if len(ds) != 1 {
		t.Fatalf("%d deliveries, want 1", len(ds))
	}
	if code, body := r.in.post(t, ds[0].header, ds[0].body); code != http.StatusOK {
		t.Fatalf("redelivery: %d %s", code, body)
	}
	psp := r.fakes.Adyen.Events()[0].Item.PSPReference
	out, err := r.client.Charge(ctx, p)
	if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != psp {
		t.Fatalf("retry after the notification: %+v %v, want SUCCEEDED %s", out, err, psp)
	}
	again, err := r.client.Charge(ctx, p)
	if err != nil || !again.Replayed || again.ProviderID != psp {
		t.Fatalf("replay: %+v %v", again, err)
	}
	pvCheckOneCharge(t, r.pool, r.client, r.fakes, "adyen", "w5", psp, 1500)
	if got := r.outcomes(t); got[payments.EventApplied] != 1 || len(got) != 1 {
		t.Fatalf("stored events %v, want one applied", got)
	}
}

// PayPal's events out of order: the refund's PAYMENT.CAPTURE.REFUNDED
// before the charge's PAYMENT.CAPTURE.COMPLETED, both after the
// synchronous answers: both confirm, nothing is posted twice.
func TestPayPalWebhooksOutOfOrder(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "paypal", 0)
	ctx := context.Background()
	r.in.drop.Store(true)
	ch, err := r.client.Charge(ctx, pvParams(t, "paypal", "c1", "20.00"))
	if err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", ch, err)
	}
	rf, err := r.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "5.00")})
	if err != nil || rf.Status != payments.IntentSucceeded {
		t.Fatalf("refund: %+v %v", rf, err)
	}
	r.wait(t)
	r.in.drop.Store(false)
	refunded, refundedID := paypalDelivery(t, r, "PAYMENT.CAPTURE.REFUNDED")
	completed, completedID := paypalDelivery(t, r, "PAYMENT.CAPTURE.COMPLETED")
	for _, d := range []pvDelivery{refunded, completed} {
		if code, body := r.in.post(t, d.header, d.body); code != http.StatusOK {
			t.Fatalf("delivery: %d %s", code, body)
		}
	}
	want := map[string]string{refundedID: payments.EventConfirmed, completedID: payments.EventConfirmed}
	if got := r.eventOutcomes(t); !maps.Equal(got, want) {
		t.Fatalf("stored events %v, want %v", got, want)
	}
	pvCheckOneCharge(t, r.pool, r.client, r.fakes, "paypal", "c1", ch.ProviderID, 1500)
	if e, p := pvEntries(t, r.pool, composed(t, "refund", "r1")); e != 1 || p != 2 {
		t.Fatalf("refund: %d ledger entries with %d postings, want 1 with 2", e, p)
	}
	if got := r.cash(t); got != "15.00" {
		t.Fatalf("ledger provider cash %s, want 15.00", got)
	}
}

// A PayPal delivery that PayPal does not verify (another webhook id, a
// tampered body, a missing header) is refused 401 and stores nothing.
func TestPayPalWebhookVerificationFailure(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "paypal", 0)
	ctx := context.Background()
	r.in.drop.Store(true)
	ch, err := r.client.Charge(ctx, pvParams(t, "paypal", "c1", "20.00"))
	if err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", ch, err)
	}
	r.wait(t)
	r.in.drop.Store(false)
	d, _ := paypalDelivery(t, r, "PAYMENT.CAPTURE.COMPLETED")

	// The same database, a client whose PayPal provider names another
	// webhook subscription.
	wrong, err := paypal.New(&paypal.Config{ClientID: fakes.PayPalClientID, Secret: fakes.PayPalSecret,
		BaseURL: r.fakes.PayPal.URL(), HTTPClient: noKeepAliveClient(nil), WebhookID: "WH-SOMEONE-ELSE"})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := pvClient(t, r.pool, wrong, 2*time.Second)
	h, err := other.WebhookHandler("paypal", nil)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/webhooks/paypal", bytes.NewReader(d.body))
	maps.Copy(req.Header, d.header)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("wrong webhook id: %d %s, want 401", rec.Code, rec.Body)
	}

	tampered := bytes.Replace(d.body, []byte(`"20.00"`), []byte(`"2000.00"`), 1)
	if bytes.Equal(tampered, d.body) {
		t.Fatal("the delivery carries no amount 20.00 to tamper with")
	}
	if code, body := r.in.post(t, d.header, tampered); code != http.StatusUnauthorized {
		t.Fatalf("tampered body: %d %s, want 401", code, body)
	}
	noSig := d.header.Clone()
	noSig.Del(paypal.HeaderTransmissionSig)
	if code, body := r.in.post(t, noSig, d.body); code != http.StatusUnauthorized {
		t.Fatalf("no signature: %d %s, want 401", code, body)
	}
	if got := r.outcomes(t); len(got) != 0 {
		t.Fatalf("refused deliveries stored %v", got)
	}
	// The genuine delivery is accepted: the refusals were about the
	// signature, not the event.
	if code, body := r.in.post(t, d.header, d.body); code != http.StatusOK {
		t.Fatalf("genuine delivery: %d %s", code, body)
	}
	if got := r.outcomes(t); got[payments.EventConfirmed] != 1 || len(got) != 1 {
		t.Fatalf("stored events %v, want one confirmed", got)
	}
}

// Refund documents that a refund beyond the charge is an
// *InvalidRequestError matching errors.Is(err, ErrRefundExceedsCharge), on
// the first call and on every replay of its key.
func TestRefundExceedsChargeIsItsSentinel(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := pvFakes(t, "adyen", "", 0)
	c, _ := pvClient(t, pool, pvProvider(t, "adyen", pvURL(s), noKeepAliveClient(nil)), 2*time.Second)
	ctx := context.Background()
	if _, err := c.Charge(ctx, pvParams(t, "adyen", "c1", "10.00")); err != nil {
		t.Fatal(err)
	}
	rp := payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "10.01")}
	for i := 0; i < 2; i++ {
		_, err := c.Refund(ctx, rp)
		var inv *provider.InvalidRequestError
		if !errors.As(err, &inv) || inv.Code != "refund_exceeds_charge" {
			t.Fatalf("call %d: %v, want refund_exceeds_charge", i, err)
		}
		if !errors.Is(err, provider.ErrRefundExceedsCharge) {
			t.Errorf("call %d: errors.Is(%v, ErrRefundExceedsCharge) is false, as refund.go documents it true", i, err)
		}
	}
	if n := s.Adyen.Counts(provider.DeriveKey(composed(t, "refund", "r1"), "refund", 0, adyen.MaxReferenceLen)).Refunds; n != 0 {
		t.Fatalf("%d refunds reached Adyen, want 0", n)
	}
}

// A REFUND notification for a refund made outside payonce (Adyen's
// Customer Area) is carried by no intent: it must be stored unmatched, for
// the reconciler, even when a payonce refund of the same charge has the
// same amount.
func TestAdyenOutsideRefundIsUnmatched(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 0)
	ctx := context.Background()
	ch, err := r.client.Charge(ctx, pvParams(t, "adyen", "c4", "10.00"))
	if err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", ch, err)
	}
	rf, err := r.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c4", Amount: pvEUR(t, "5.00")})
	if err != nil || rf.Status != payments.IntentPending {
		t.Fatalf("refund: %+v %v", rf, err)
	}
	r.wait(t)
	res, err := r.prov.(*adyen.Provider).Client().Refund(ctx, ch.ProviderID,
		adyen.ModificationRequest{Amount: adyen.Amount{Currency: "EUR", Value: 500}, Reference: "manual_refund_2"}, "manual_refund_2")
	if err != nil {
		t.Fatal(err)
	}
	r.wait(t)
	if got := r.fakes.Net("adyen")["EUR"]; got != 0 {
		t.Fatalf("Adyen net %d, want 0 (both refunds went through)", got)
	}
	if got := r.eventOutcomes(t)[res.PSPReference+":REFUND:true"]; got != payments.EventUnmatched {
		t.Errorf("the outside refund's REFUND is stored %q, want %q: payonce's ledger says 5.00 is left at Adyen, Adyen holds 0.00",
			got, payments.EventUnmatched)
	}
}

// deliverFirst hands the adapter a refund's response only once the fake
// delivered the notifications it emitted: the REFUND notification is then
// applied before the synchronous call commits.
type deliverFirst struct {
	base http.RoundTripper
	s    *fakes.Set
}

func (d deliverFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.base.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/refunds") {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if werr := d.s.WaitDeliveries(ctx); werr != nil {
			resp.Body.Close()
			return nil, werr
		}
	}
	return resp, err
}

// The REFUND notification is applied before the synchronous refund
// commits: the refund is posted once (success) or its reservation
// released once (failure), whoever commits first.
func TestAdyenRefundNotificationBeforeTheSynchronousCommit(t *testing.T) {
	t.Parallel()
	r := pvWebhookRigWith(t, "adyen", 0, func(s *fakes.Set) http.RoundTripper {
		return deliverFirst{base: &http.Transport{DisableKeepAlives: true}, s: s}
	})
	ctx := context.Background()
	ch, err := r.client.Charge(ctx, pvParams(t, "adyen", "c5", "10.00"))
	if err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", ch, err)
	}
	refund := func(key, amount string) (payments.Outcome, error) {
		return r.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: key, ChargeKey: "c5", Amount: pvEUR(t, amount)})
	}
	ok, err := refund("r1", "3.00")
	if err != nil || ok.Status != payments.IntentPending {
		t.Fatalf("refund r1: %+v %v, want PENDING (the synchronous answer)", ok, err)
	}
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r1"); err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != ok.ProviderID {
		t.Fatalf("refund intent r1: %+v %v, want SUCCEEDED (the late PENDING must not undo it)", in, err)
	}
	if e, p := pvEntries(t, r.pool, composed(t, "refund", "r1")); e != 1 || p != 2 {
		t.Fatalf("refund r1: %d ledger entries with %d postings, want 1 with 2", e, p)
	}
	// 7.00 left; Adyen holds 7.00 too, minus 5.00 refunded outside payonce.
	if _, err := r.prov.(*adyen.Provider).Client().Refund(ctx, ch.ProviderID,
		adyen.ModificationRequest{Amount: adyen.Amount{Currency: "EUR", Value: 500}, Reference: "manual_refund_3"}, "manual_refund_3"); err != nil {
		t.Fatal(err)
	}
	r.wait(t)
	bad, err := refund("r2", "7.00")
	if err != nil || bad.Status != payments.IntentPending {
		t.Fatalf("refund r2: %+v %v, want PENDING", bad, err)
	}
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r2"); err != nil || in.Status != payments.IntentFailed {
		t.Fatalf("refund intent r2: %+v %v, want FAILED", in, err)
	}
	// Released exactly once: 7.00 can be reserved again, not 7.01.
	var inv *provider.InvalidRequestError
	if _, err := refund("r3", "7.01"); !errors.As(err, &inv) || inv.Code != "refund_exceeds_charge" {
		t.Fatalf("refund r3 of 7.01: %v, want refund_exceeds_charge", err)
	}
	if out, err := refund("r4", "2.00"); err != nil || out.Status != payments.IntentPending {
		t.Fatalf("refund r4: %+v %v", out, err)
	}
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r4"); err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("refund intent r4: %+v %v, want SUCCEEDED", in, err)
	}
	if got := r.cash(t); got != "5.00" {
		t.Fatalf("ledger provider cash %s, want 5.00", got)
	}
	if got := r.fakes.Net("adyen")["EUR"]; got != 0 {
		t.Fatalf("Adyen net %d, want 0", got)
	}
}

// A PayPal refund whose response was lost is settled by its
// PAYMENT.CAPTURE.REFUNDED event (found by the refund's custom_id, its id
// not being known locally); the retry then answers the settled refund.
func TestPayPalRefundedSettlesALostRefund(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "paypal", 1)
	ctx := context.Background()
	if _, err := r.client.Charge(ctx, pvParams(t, "paypal", "c1", "10.00")); err != nil {
		t.Fatal(err)
	}
	r.fakes.PayPal.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: "/v2/payments/captures/*/refund"})
	rp := payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "4.00")}
	if _, err := r.client.Refund(ctx, rp); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost refund response: %v", err)
	}
	r.wait(t)
	in, err := r.client.RefundIntent(ctx, "cus_1", "r1")
	if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID == "" {
		t.Fatalf("refund intent after PAYMENT.CAPTURE.REFUNDED: %+v %v", in, err)
	}
	out, err := r.client.Refund(ctx, rp)
	if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != in.ProviderID {
		t.Fatalf("refund retry: %+v %v", out, err)
	}
	ref := provider.DeriveKey(composed(t, "refund", "r1"), "refund", 0, paypal.MaxProviderKeyLen)
	if n := r.fakes.PayPal.CountsByCustomID(ref).Refunds; n != 1 {
		t.Fatalf("%d refunds at PayPal, want 1", n)
	}
	if e, p := pvEntries(t, r.pool, composed(t, "refund", "r1")); e != 1 || p != 2 {
		t.Fatalf("refund: %d ledger entries with %d postings, want 1 with 2", e, p)
	}
	if got := r.cash(t); got != "6.00" {
		t.Fatalf("ledger provider cash %s, want 6.00", got)
	}
}
