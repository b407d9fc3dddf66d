package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

type whBundle struct {
	bundle
	recv *httptest.Server
	// drop, when set, answers deliveries 200 without handling them: the
	// webhook that never came.
	drop *atomic.Bool
}

// setupWebhooks wires the Stripe fake's webhook deliveries to the
// client's receiver; every event is delivered 1+dup times.
func setupWebhooks(t *testing.T, dup int) whBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	var h atomic.Pointer[http.Handler]
	drop := new(atomic.Bool)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if drop.Load() {
			return
		}
		(*h.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(recv.Close)
	fake := stripetest.NewServer(&stripetest.Config{WebhookURL: recv.URL, DuplicateWebhooks: dup})
	t.Cleanup(fake.Close)
	prov, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_wh", BaseURL: fake.URL(),
		HTTPClient:     &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		WebhookSecrets: []string{stripetest.DefaultWebhookSecret}})
	if err != nil {
		t.Fatal(err)
	}
	store, l := openStoreLedger(t, pool)
	c, err := payments.New(pool, []provider.Provider{prov}, &payments.Config{Store: store, Ledger: l, LockTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := c.WebhookHandler("stripe", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Store(&handler)
	return whBundle{bundle: bundle{pool: pool, client: c, ledger: l, fake: fake}, recv: recv, drop: drop}
}

func (b whBundle) waitDeliveries(t *testing.T) {
	t.Helper()
	waitDeliveries(t, b.fake)
}

// outcomes counts stored events by outcome.
func (b whBundle) outcomes(t *testing.T) map[string]int {
	t.Helper()
	return outcomeCounts(t, b.pool, "")
}

func entries(t *testing.T, b bundle, key string) int {
	t.Helper()
	k, _ := idempotency.ComposeKey("cus_1", "charge", key)
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_entries WHERE key = $1`, k).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A lost response leaves the intent UNKNOWN; the provider's webhook
// (delivered 5 times) settles it once; the client's retry then replays.
func TestWebhookSettlesALostResponse(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 4)
	ctx := context.Background()
	b.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	_, err := b.client.Charge(ctx, params(t, "w1", "25.00", stripetest.PaymentMethodVisa))
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	b.waitDeliveries(t)
	in, err := b.client.Intent(ctx, "cus_1", "w1")
	if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID == "" {
		t.Fatalf("intent after the webhook: %+v %v", in, err)
	}
	if n := entries(t, b.bundle, "w1"); n != 1 {
		t.Fatalf("%d ledger entries, want 1", n)
	}
	if got := b.outcomes(t); got[payments.EventApplied] != 1 || len(got) != 1 {
		t.Fatalf("stored events: %v, want one applied (the 4 redeliveries change nothing)", got)
	}
	out, err := b.client.Charge(ctx, params(t, "w1", "25.00", stripetest.PaymentMethodVisa))
	if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != in.ProviderID {
		t.Fatalf("retry after the webhook: %+v %v", out, err)
	}
	if n := entries(t, b.bundle, "w1"); n != 1 || pis(t, b.bundle, "w1") != 1 || balance(t, b.bundle) != "25.00" {
		t.Fatalf("after the retry: %d entries, %d PaymentIntents, cash %s", n, pis(t, b.bundle, "w1"), balance(t, b.bundle))
	}
}

// The webhook arrives while the synchronous call has the provider's
// answer but has not committed it: one posting, whoever commits first.
func TestWebhookBeforeTheSynchronousCommit(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	payments.SetCrashHooks(b.client, payments.CrashHooks{AfterProvider: func(context.Context, string) { b.waitDeliveries(t) }})
	out, err := b.client.Charge(context.Background(), params(t, "w2", "9.99", stripetest.PaymentMethodVisa))
	if err != nil || out.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", out, err)
	}
	if got := b.outcomes(t); got[payments.EventApplied] != 1 {
		t.Fatalf("the webhook did not settle first: %v", got)
	}
	if n := entries(t, b.bundle, "w2"); n != 1 || balance(t, b.bundle) != "9.99" {
		t.Fatalf("%d ledger entries, cash %s; want 1 and 9.99", n, balance(t, b.bundle))
	}
}

// signed posts a hand-made Stripe event to the receiver.
func (b whBundle) signed(t *testing.T, payload string, secret string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.recv.URL, strings.NewReader(payload))
	req.Header.Set("Stripe-Signature", stripetest.Sign([]byte(payload), secret, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func piEvent(id, typ, pi, key string, amount int64, status string) string {
	return fmt.Sprintf(`{"id": %q, "object": "event", "type": %q, "api_version": "2024-06-20", "created": %d,
		"data": {"object": {"id": %q, "object": "payment_intent", "amount": %d, "amount_received": %d, "currency": "eur",
		"status": %q, "metadata": {"payonce_key": %q},
		"last_payment_error": {"type": "card_error", "code": "card_declined", "decline_code": "generic_decline"}}}}`,
		id, typ, time.Now().Unix(), pi, amount, amount, status, key)
}

// The same event delivered 5 times at once has one effect; events out of
// order never move a settled intent backwards.
func TestWebhookStormAndOrder(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	ctx := context.Background()
	// An intent left UNKNOWN by a lost response, whose webhook never came.
	b.drop.Store(true)
	b.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	_, err := b.client.Charge(ctx, params(t, "w3", "40.00", stripetest.PaymentMethodVisa))
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	b.waitDeliveries(t)
	b.drop.Store(false)
	key, _ := idempotency.ComposeKey("cus_1", "charge", "w3")
	lookup, err := b.client.Intent(ctx, "cus_1", "w3")
	if err != nil || lookup.Status != payments.IntentUnknown {
		t.Fatalf("intent before the events: %+v %v", lookup, err)
	}
	pi := b.fake.Events()[0].ObjectID
	// A late "processing", then "succeeded" five times at once, then a
	// stale failure and "processing" again.
	if code := b.signed(t, piEvent("evt_storm_0", "payment_intent.processing", pi, key, 4000, "processing"), stripetest.DefaultWebhookSecret); code != 200 {
		t.Fatalf("processing: %d", code)
	}
	var wg sync.WaitGroup
	codes := make(chan int, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- b.signed(t, piEvent("evt_storm_1", "payment_intent.succeeded", pi, key, 4000, "succeeded"), stripetest.DefaultWebhookSecret)
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("a concurrent delivery got %d, want 200", c)
		}
	}
	b.signed(t, piEvent("evt_storm_2", "payment_intent.payment_failed", pi, key, 4000, "requires_payment_method"), stripetest.DefaultWebhookSecret)
	b.signed(t, piEvent("evt_storm_3", "payment_intent.processing", pi, key, 4000, "processing"), stripetest.DefaultWebhookSecret)

	in, err := b.client.Intent(ctx, "cus_1", "w3")
	if err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("intent: %+v %v, want SUCCEEDED", in, err)
	}
	if n := entries(t, b.bundle, "w3"); n != 1 {
		t.Fatalf("%d ledger entries, want 1", n)
	}
	want := map[string]string{"evt_storm_0": payments.EventConfirmed, "evt_storm_1": payments.EventApplied,
		"evt_storm_2": payments.EventStale, "evt_storm_3": payments.EventStale}
	rows, err := b.pool.Query(ctx, `SELECT event_id, outcome FROM webhook_events`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, o string
		if err := rows.Scan(&id, &o); err != nil {
			t.Fatal(err)
		}
		got[id] = o
	}
	rows.Close()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored events %v, want %v", got, want)
	}
}

// Refused deliveries store nothing; an unknown type is acknowledged and
// recorded as ignored; an event naming no intent is recorded unmatched.
func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	ok := piEvent("evt_bad_1", "payment_intent.succeeded", "pi_x", "cus_1_charge_nope", 100, "succeeded")
	if code := b.signed(t, ok, "whsec_wrong"); code != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodPost, b.recv.URL, strings.NewReader(ok))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no signature: %d, want 401", resp.StatusCode)
	}
	if code := b.signed(t, `{"id": "evt_bad_2", "object": "event", "type": `, stripetest.DefaultWebhookSecret); code != http.StatusBadRequest {
		t.Fatalf("malformed JSON: %d, want 400", code)
	}
	if code := b.signed(t, `{"id": "evt_big", "pad": "`+strings.Repeat("x", 2<<20)+`"}`, stripetest.DefaultWebhookSecret); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize body: %d, want 413", code)
	}
	resp, err = http.Get(b.recv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d, want 405", resp.StatusCode)
	}
	if got := b.outcomes(t); len(got) != 0 {
		t.Fatalf("refused deliveries stored %v", got)
	}
	unknownType := strings.Replace(ok, `"payment_intent.succeeded"`, `"customer.created"`, 1)
	unknownType = strings.Replace(unknownType, "evt_bad_1", "evt_bad_3", 1)
	if code := b.signed(t, unknownType, stripetest.DefaultWebhookSecret); code != 200 {
		t.Fatalf("unknown type: %d, want 200", code)
	}
	if code := b.signed(t, ok, stripetest.DefaultWebhookSecret); code != 200 {
		t.Fatalf("event for no intent: %d, want 200", code)
	}
	if got := b.outcomes(t); got[payments.EventIgnoredOutcome] != 1 || got[payments.EventUnmatched] != 1 || len(got) != 2 {
		t.Fatalf("outcomes %v, want one ignored and one unmatched", got)
	}
}

// Stripe caches a 500 produced after the charge: every retry with the key
// gets it again. Once the webhook settled the intent, a retry records that
// state and answers it, without asking the provider.
func TestRetryAfterTheWebhookSettledACached500(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	ctx := context.Background()
	b.drop.Store(true)
	b.fake.Inject(stripetest.Fault{Kind: stripetest.FailAfter, Method: "POST", Path: "/v1/payment_intents"})
	p := params(t, "w5", "15.00", stripetest.PaymentMethodVisa)
	if _, err := b.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("500 after the charge: %v", err)
	}
	b.waitDeliveries(t)
	if _, err := b.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("retry of a cached 500 before any webhook: %v, want still unknown", err)
	}
	// The provider redelivers the event; this time it is handled.
	b.drop.Store(false)
	ev := b.fake.Events()[0]
	req, _ := http.NewRequest(http.MethodPost, b.recv.URL, strings.NewReader(string(ev.Payload)))
	req.Header.Set("Stripe-Signature", stripetest.Sign(ev.Payload, stripetest.DefaultWebhookSecret, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	out, err := b.client.Charge(ctx, p)
	if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != ev.ObjectID {
		t.Fatalf("retry after the webhook: %+v %v", out, err)
	}
	again, err := b.client.Charge(ctx, p)
	if err != nil || !again.Replayed || again.ProviderID != ev.ObjectID {
		t.Fatalf("replay: %+v %v", again, err)
	}
	if n := entries(t, b.bundle, "w5"); n != 1 || pis(t, b.bundle, "w5") != 1 || balance(t, b.bundle) != "15.00" {
		t.Fatalf("%d entries, %d PaymentIntents, cash %s", n, pis(t, b.bundle, "w5"), balance(t, b.bundle))
	}
}

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

// checkCash fails unless the ledger's provider cash at the rig's provider
// is want.
func (r pvRig) checkCash(t testing.TB, want string) {
	t.Helper()
	if got := r.cash(t); got != want {
		t.Fatalf("ledger provider cash %s, want %s", got, want)
	}
}

// checkNet fails unless the net the rig's provider holds, in EUR minor
// units, is want.
func (r pvRig) checkNet(t testing.TB, want int64) {
	t.Helper()
	if got := r.fakes.Net(r.provider)["EUR"]; got != want {
		t.Fatalf("%s net %d, want %d", r.provider, got, want)
	}
}

// refundOutside refunds value (EUR minor units) of the Adyen payment psp
// as Adyen's Customer Area would, outside payonce, under reference.
func (r pvRig) refundOutside(t testing.TB, psp string, value int64, reference string) *adyen.ModificationResponse {
	t.Helper()
	res, err := r.prov.(*adyen.Provider).Client().Refund(context.Background(), psp,
		adyen.ModificationRequest{Amount: adyen.Amount{Currency: "EUR", Value: value}, Reference: reference}, reference)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// charge charges amount under key and fails unless it succeeded.
func (r pvRig) charge(t testing.TB, key, amount string) payments.Outcome {
	t.Helper()
	ch, err := r.client.Charge(context.Background(), pvParams(t, r.provider, key, amount))
	if err != nil || ch.Status != payments.IntentSucceeded {
		t.Fatalf("charge %s: %+v %v", key, ch, err)
	}
	return ch
}

// checkRefundIntent fails unless the refund intent of key has status want.
func (r pvRig) checkRefundIntent(t testing.TB, key string, want payments.IntentStatus) {
	t.Helper()
	if in, err := r.client.RefundIntent(context.Background(), "cus_1", key); err != nil || in.Status != want {
		t.Fatalf("refund intent %s: %+v %v, want %s", key, in, err, want)
	}
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
	forAdyenAndPayPal(t, func(t *testing.T, provider string) {
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
		r.checkCash(t, "25.00")
	})
}

// The notification arrives while the synchronous call has the provider's
// answer but has not committed it: one posting, whoever commits first.
func TestWebhookBeforeTheSynchronousCommitAdyenPayPal(t *testing.T) {
	t.Parallel()
	forAdyenAndPayPal(t, func(t *testing.T, provider string) {
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
		r.checkCash(t, "9.99")
	})
}

// The same real delivery posted 5 times at once is stored once and has one
// effect.
func TestWebhookStormAdyenPayPal(t *testing.T) {
	t.Parallel()
	forAdyenAndPayPal(t, func(t *testing.T, provider string) {
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

// Adyen's notifications out of order: a REFUND before the AUTHORISATION,
// the REFUND's success=false after its success=true, a late AUTHORISATION
// after the synchronous settle, a failed AUTHORISATION after the success.
// Nothing moves backwards and nothing is posted twice.
func TestAdyenWebhooksOutOfOrder(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 0)
	ctx := context.Background()
	r.in.drop.Store(true)
	ch := r.charge(t, "c1", "20.00")
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
	r.checkRefundIntent(t, "r1", payments.IntentSucceeded)
	pvCheckOneCharge(t, r.pool, r.client, r.fakes, "adyen", "c1", ch.ProviderID, 1500)
	checkRefundPosted(t, r.pool, "r1")
	r.checkCash(t, "15.00")
}

// Adyen only acknowledges a refund: Refund answers PENDING, and the REFUND
// notification settles the refund intent and posts it, once.
func TestAdyenRefundSettledByWebhook(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 2)
	ctx := context.Background()
	r.charge(t, "c2", "10.00")
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
	checkRefundPosted(t, r.pool, "r2")
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
	r.checkCash(t, "6.00")
	r.checkNet(t, 600)
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
	ch := r.charge(t, "c3", "10.00")
	// 6.00 refunded in Adyen's Customer Area, outside payonce: Adyen will
	// refuse a refund of more than the 4.00 left.
	r.refundOutside(t, ch.ProviderID, 600, "manual_refund_1")
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
	r.checkRefundIntent(t, "r1", payments.IntentFailed)
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
	r.checkRefundIntent(t, "r3", payments.IntentFailed)
	r4, err := refund("r4", "4.00")
	if err != nil || r4.Status != payments.IntentPending {
		t.Fatalf("refund r4: %+v %v", r4, err)
	}
	r.wait(t)
	r.checkRefundIntent(t, "r4", payments.IntentSucceeded)
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
	r.checkCash(t, "6.00")
	r.checkNet(t, 0)
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
	ch := r.charge(t, "c1", "20.00")
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
	checkRefundPosted(t, r.pool, "r1")
	r.checkCash(t, "15.00")
}

// A PayPal delivery that PayPal does not verify (another webhook id, a
// tampered body, a missing header) is refused 401 and stores nothing.
func TestPayPalWebhookVerificationFailure(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "paypal", 0)
	r.in.drop.Store(true)
	r.charge(t, "c1", "20.00")
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
	ch := r.charge(t, "c4", "10.00")
	rf, err := r.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c4", Amount: pvEUR(t, "5.00")})
	if err != nil || rf.Status != payments.IntentPending {
		t.Fatalf("refund: %+v %v", rf, err)
	}
	r.wait(t)
	res := r.refundOutside(t, ch.ProviderID, 500, "manual_refund_2")
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
	ch := r.charge(t, "c5", "10.00")
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
	checkRefundPosted(t, r.pool, "r1")
	// 7.00 left; Adyen holds 7.00 too, minus 5.00 refunded outside payonce.
	r.refundOutside(t, ch.ProviderID, 500, "manual_refund_3")
	r.wait(t)
	bad, err := refund("r2", "7.00")
	if err != nil || bad.Status != payments.IntentPending {
		t.Fatalf("refund r2: %+v %v, want PENDING", bad, err)
	}
	r.checkRefundIntent(t, "r2", payments.IntentFailed)
	// Released exactly once: 7.00 can be reserved again, not 7.01.
	var inv *provider.InvalidRequestError
	if _, err := refund("r3", "7.01"); !errors.As(err, &inv) || inv.Code != "refund_exceeds_charge" {
		t.Fatalf("refund r3 of 7.01: %v, want refund_exceeds_charge", err)
	}
	if out, err := refund("r4", "2.00"); err != nil || out.Status != payments.IntentPending {
		t.Fatalf("refund r4: %+v %v", out, err)
	}
	r.checkRefundIntent(t, "r4", payments.IntentSucceeded)
	r.checkCash(t, "5.00")
	r.checkNet(t, 0)
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
	checkRefundPosted(t, r.pool, "r1")
	r.checkCash(t, "6.00")
}

// Adyen signs pspReference, originalReference, merchantAccountCode, merchantReference, value,
// currency, eventCode and success; additionalData (and the metadata echoed in it) is outside
// the HMAC. A notification whose signed fields name no intent of ours (a payment made outside
// payonce) or another one, and whose unsigned metadata.payonce_key names a victim's open
// intent, must not settle the victim: only signed fields identify an intent.
func TestAdyenEventNeverSettlesTheIntentItsUnsignedMetadataNames(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 0)
	ctx := context.Background()
	r.in.drop.Store(true) // the victim's own AUTHORISATION never arrives: it stays UNKNOWN
	r.loseCharge(t, "victim", "30.00")
	r.loseCharge(t, "other", "12.00")
	r.wait(t)
	victim := composed(t, "charge", "victim")

	forged := func(it adyentest.NotificationItem, psp, reference string) adyentest.NotificationItem {
		it.PSPReference, it.MerchantReference = psp, reference
		it = adyenResigned(t, it, "true", "") // signed as Adyen signs that (other) payment
		it.AdditionalData = maps.Clone(it.AdditionalData)
		it.AdditionalData["metadata."+adyen.MetadataKey] = victim // unsigned: anyone could have put it there
		return it
	}
	var victimPSP, otherPSP string
	for _, ev := range r.fakes.Adyen.Events() {
		switch ev.Item.MerchantReference {
		case provider.DeriveKey(victim, provider.StepCharge, 0, adyen.MaxReferenceLen):
			victimPSP = ev.Item.PSPReference
		case provider.DeriveKey(composed(t, "charge", "other"), provider.StepCharge, 0, adyen.MaxReferenceLen):
			otherPSP = ev.Item.PSPReference
		}
	}
	if victimPSP == "" || otherPSP == "" {
		t.Fatalf("the fake emitted no AUTHORISATION for the two charges: %+v", r.fakes.Adyen.Events())
	}
	base := adyenItem(t, r.fakes.Adyen, "AUTHORISATION", victimPSP)

	// Signed fields naming nothing of ours.
	if code, body := r.in.post(t, nil, adyenDelivery(t, forged(base, "PSPOUTSIDE000001", "not-a-payonce-reference"))); code != 200 {
		t.Fatalf("delivery answered %d %s", code, body)
	}
	// Signed fields naming the other intent: it settles that one, never the victim.
	other := adyenItem(t, r.fakes.Adyen, "AUTHORISATION", otherPSP)
	if code, body := r.in.post(t, nil, adyenDelivery(t, forged(other, other.PSPReference, other.MerchantReference))); code != 200 {
		t.Fatalf("delivery answered %d %s", code, body)
	}

	in, err := r.client.Intent(ctx, "cus_1", "victim")
	if err != nil || in.Status != payments.IntentUnknown || in.ProviderID != "" {
		t.Fatalf("victim after events naming it only in unsigned metadata: %+v %v, want still UNKNOWN", in, err)
	}
	if e, _ := pvEntries(t, r.pool, victim); e != 0 {
		t.Fatalf("%d ledger entries for the victim, want 0", e)
	}
	if in, err := r.client.Intent(ctx, "cus_1", "other"); err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != otherPSP {
		t.Fatalf("other intent: %+v %v, want SUCCEEDED by its own signed reference", in, err)
	}
	outcomes := r.eventOutcomes(t)
	if got := outcomes["PSPOUTSIDE000001:AUTHORISATION:true"]; got != payments.EventUnmatched {
		t.Fatalf("outside payment's event: outcome %q, want %q (all: %v)", got, payments.EventUnmatched, outcomes)
	}
}

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
	r.checkRefundIntent(t, "arf", payments.IntentSucceeded)
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
	r.checkRefundIntent(t, "arf", payments.IntentFailed)
	if e, p := pvEntries(t, r.pool, composed(t, "refund", "arf")); e != 2 || p != 4 {
		t.Fatalf("refund: %d entries with %d postings, want the refund and its reversal", e, p)
	}
	r.checkCash(t, "10.00")
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
