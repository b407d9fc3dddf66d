package reconcile_test

// The interleaving driver: for each pair of actors (a client retry, in
// three flavours of provider answer; a reconciler run; a webhook delivery;
// an operator's review decision), each pause point of the first, each
// starting state (the first attempt charged and its answer lost, or
// refused by a 5xx before the provider did anything), charges and refunds,
// and each of the three providers, it pauses actor A at its point, runs
// actor B to completion, resumes A, lets the system converge (webhooks
// delivered, retries, reconciler runs, an operator deciding reviews from
// the provider's records) and checks the promise against the fake's own
// records:
//
//   - at most one money-moving provider object per key (charge or refund);
//   - no FAILED or DECLINED intent with money at the provider, no
//     SUCCEEDED one without;
//   - the ledger's entries for the key equal the money that moved;
//   - the ledger equal to the provider's net, per currency, at the end.
//
// Actors are told apart by their context (crashpoint.WithActor); faults are
// the provider's answers to money-moving requests, injected in the
// adapters' HTTP client per actor: "lost" (the provider executed it, the
// answer never came), "5xx" (refused before anything executed), "403" (a
// rolled API key: this request refused, nothing else known).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/crashpoint"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/reconcile"
)

// An actor's fault on the money-moving requests it sends.
type fault string

const (
	faultNone fault = ""
	faultLost fault = "lost" // executed, answer lost
	fault5xx  fault = "5xx"  // refused before executing
	fault403  fault = "403"  // permission refused (a rolled key)
)

// faultTransport applies to each money-moving POST the fault of the actor
// that sends it.
type faultTransport struct {
	next   http.RoundTripper
	mu     sync.Mutex
	faults map[string]fault
	// cut: actors whose connection to the provider is gone (after a lost
	// answer, their every later request fails unsent).
	cut map[string]bool
}

func (ft *faultTransport) set(actor string, f fault) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	ft.faults[actor] = f
	delete(ft.cut, actor)
}

// movesMoney: Stripe's PaymentIntent create (confirmed) and refund; Adyen's
// payment and its refund and capture; PayPal's order create (completed on
// creation with a vaulted payment source), capture and refund.
func movesMoney(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	p := r.URL.Path
	switch {
	case p == "/v1/payment_intents", p == "/v1/refunds", p == "/v2/checkout/orders":
		return true
	case strings.HasSuffix(p, "/payments"), strings.HasSuffix(p, "/refunds"), strings.HasSuffix(p, "/captures"):
		return true
	case strings.HasSuffix(p, "/capture"), strings.HasSuffix(p, "/refund"):
		return true
	}
	return false
}

func (ft *faultTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	actor := crashpoint.Actor(r.Context())
	ft.mu.Lock()
	f, cut := ft.faults[actor], ft.cut[actor]
	ft.mu.Unlock()
	if cut {
		return nil, errors.New("interleave: no route to the provider")
	}
	if f == faultNone || !movesMoney(r) {
		return ft.next.RoundTrip(r)
	}
	switch f {
	case faultLost:
		ft.mu.Lock()
		ft.cut[actor] = true
		ft.mu.Unlock()
		res, err := ft.next.RoundTrip(r)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return nil, errors.New("interleave: connection reset after the provider answered")
	case fault5xx:
		return synthesized(r, http.StatusInternalServerError), nil
	}
	return synthesized(r, http.StatusForbidden), nil
}

// synthesized is the provider's documented error body for status, as its
// API would answer (docs/providers.md).
func synthesized(r *http.Request, status int) *http.Response {
	var body string
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/"): // Stripe
		typ := "api_error"
		if status == http.StatusForbidden {
			typ = "invalid_request_error"
		}
		body = fmt.Sprintf(`{"error":{"type":%q,"message":"interleave: refused with %d"}}`, typ, status)
	case strings.HasPrefix(r.URL.Path, "/v2/"): // PayPal
		name := "INTERNAL_SERVER_ERROR"
		if status == http.StatusForbidden {
			name = "NOT_AUTHORIZED"
		}
		body = fmt.Sprintf(`{"name":%q,"message":"interleave: refused with %d","debug_id":"dbg"}`, name, status)
	default: // Adyen
		code, typ := "905", "internal"
		if status == http.StatusForbidden {
			code, typ = "010", "security"
		}
		body = fmt.Sprintf(`{"status":%d,"errorCode":%q,"message":"interleave: refused","errorType":%q}`, status, code, typ)
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r}
}

// mailbox takes the fakes' webhook deliveries and holds them (answered
// 200, as a receiver that stored them) until an actor delivers them.
type mailbox struct {
	mu      sync.Mutex
	pending []delivery
}

type delivery struct {
	provider string
	header   http.Header
	body     []byte
}

func (m *mailbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.pending = append(m.pending, delivery{provider: strings.TrimPrefix(r.URL.Path, "/webhooks/"), header: r.Header.Clone(), body: body})
	m.mu.Unlock()
}

// iworld is one provider's fake, a payments client on its own schema, and
// the actors' plumbing.
type iworld struct {
	// name tells this world's actors from other worlds' (worlds run in
	// parallel; the pause hook is process-wide).
	name      string
	provider  string
	pool      *pgxpool.Pool
	fakes     *fakes.Set
	client    *payments.Client
	recon     *reconcile.Reconciler
	transport *faultTransport
	mail      *mailbox
	handlers  map[string]http.Handler
}

func newIWorld(t *testing.T, provider string) *iworld {
	return newIWorldLease(t, provider, time.Minute)
}

// newIWorldLease is newIWorld with the payments client's lease.
func newIWorldLease(t *testing.T, provider string, lease time.Duration) *iworld {
	t.Helper()
	mail := &mailbox{}
	srv := httptest.NewServer(mail)
	t.Cleanup(srv.Close)
	fk := fakes.Start(fakes.Options{Stripe: provider == "stripe", Adyen: provider == "adyen", PayPal: provider == "paypal",
		WebhookBase: srv.URL})
	t.Cleanup(fk.Close)
	pool := pgtest.Pool(t)
	env := fk.Env()
	cfg, err := providers.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ft := &faultTransport{next: &http.Transport{DisableKeepAlives: true}, faults: map[string]fault{}, cut: map[string]bool{}}
	cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: ft}
	provs, err := providers.Build(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A lease long enough that no pause in this driver outlives it: a
	// paused holder is never overtaken by expiry here (that is the lease
	// tests' subject), only by what the other actor does.
	client, err := payments.New(pool, provs, &payments.Config{LockTimeout: lease})
	if err != nil {
		t.Fatal(err)
	}
	recon, err := reconcile.New(pool, client, &reconcile.Config{Grace: time.Millisecond, VoidAfter: time.Millisecond,
		ActionGrace: time.Millisecond, Schedule: []time.Duration{time.Millisecond}, MaxChecks: 6})
	if err != nil {
		t.Fatal(err)
	}
	w := &iworld{name: fmt.Sprintf("%s#%d", provider, worlds.Add(1)), provider: provider, pool: pool, fakes: fk, client: client, recon: recon, transport: ft, mail: mail,
		handlers: map[string]http.Handler{}}
	h, err := client.WebhookHandler(provider, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.handlers[provider] = h
	return w
}

// deliver hands every held webhook to the receiver, as actor; those it
// refuses stay held (the provider redelivers).
func (w *iworld) deliver(ctx context.Context) error {
	if err := w.fakes.WaitDeliveries(ctx); err != nil {
		return err
	}
	w.mail.mu.Lock()
	batch := w.mail.pending
	w.mail.pending = nil
	w.mail.mu.Unlock()
	var keep []delivery
	for _, d := range batch {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/webhooks/"+d.provider, strings.NewReader(string(d.body)))
		req.Header = d.header.Clone()
		rec := httptest.NewRecorder()
		w.handlers[d.provider].ServeHTTP(rec, req)
		if rec.Code/100 != 2 {
			keep = append(keep, d)
		}
	}
	w.mail.mu.Lock()
	w.mail.pending = append(keep, w.mail.pending...)
	w.mail.mu.Unlock()
	return nil
}

// scenario is one key's story.
type scenario struct {
	refund bool
	// start is the first attempt's fault: faultLost (executed, answer
	// lost) or fault5xx (refused before anything).
	start fault
	// key is the client's key of the action (a refund's own key), charge
	// its charge's.
	key, charge string
}

func (s scenario) chargeParams(provider string) payments.ChargeParams {
	return payments.ChargeParams{Scope: "cus_i", Key: s.charge, Provider: provider, Amount: money.MustParse("12.34", money.EUR),
		Recipient: "acct_i", PaymentMethod: "pm_card_visa"}
}

func (s scenario) refundParams() payments.RefundParams {
	return payments.RefundParams{Scope: "cus_i", Key: s.key, ChargeKey: s.charge, Amount: money.MustParse("12.34", money.EUR)}
}

func (s scenario) composed() string {
	action := "charge"
	if s.refund {
		action = "refund"
	}
	k, _ := idempotency.ComposeKey("cus_i", action, s.key)
	return k
}

// actor is one participant: what it does, the points it can be paused
// at, and the fault its money-moving requests meet.
type actor struct {
	name   string
	points []string
	fault  fault
	run    func(ctx context.Context, w *iworld, s scenario) error
}

// retry is the client's retry of the scenario's action, whose money-moving
// requests meet f.
func retry(f fault) actor {
	name := "retry"
	if f != faultNone {
		name += "-" + string(f)
	}
	return actor{name: name, points: []string{crashpoint.AfterClaim, crashpoint.AfterIntent, crashpoint.AfterProvider, crashpoint.AfterCommit},
		fault: f,
		run: func(ctx context.Context, w *iworld, s scenario) error {
			var err error
			if s.refund {
				_, err = w.client.Refund(ctx, s.refundParams())
			} else {
				_, err = w.client.Charge(ctx, s.chargeParams(w.provider))
			}
			return err
		}}
}

var (
	actorReconcile = actor{name: "reconcile", points: []string{crashpoint.ReconcileHeld, crashpoint.ReconcileBeforeApply},
		run: func(ctx context.Context, w *iworld, _ scenario) error {
			_, err := w.recon.RunOnce(ctx)
			return err
		}}
	actorWebhook = actor{name: "webhook", points: []string{crashpoint.WebhookBeforeApply},
		run: func(ctx context.Context, w *iworld, _ scenario) error { return w.deliver(ctx) }}
	actorOperator = actor{name: "operator", points: []string{crashpoint.OperatorBeforeApply},
		run: func(ctx context.Context, w *iworld, s scenario) error { return w.operate(ctx, s) }}
)

// operate is an operator deciding an intent under review from the
// provider's own records (its dashboard: a lookup by the attempt's
// references over the whole day, and the fake's count of what moved
// money). An intent not under review is left alone.
func (w *iworld) operate(ctx context.Context, s scenario) error {
	key := s.composed()
	var status, pkey, pid string
	var created time.Time
	err := w.pool.QueryRow(ctx, `SELECT status, provider_key, coalesce(provider_id, ''), created_at FROM payment_intents
		WHERE idempotency_key = $1 AND user_id = 'cus_i'`, key).Scan(&status, &pkey, &pid, &created)
	if err != nil || status != string(payments.IntentNeedsReview) {
		return err
	}
	var proof payments.Proof
	if s.refund {
		n := w.fakes.Refunds(w.provider, key)
		if n != 0 {
			rl, ok := w.client.Provider(w.provider).(provider.RefundLooker)
			if !ok {
				return nil
			}
			var chargeID string
			if err := w.pool.QueryRow(ctx, `SELECT provider_id FROM payment_intents WHERE idempotency_key = $1`,
				scenario{key: s.charge}.composed()).Scan(&chargeID); err != nil {
				return err
			}
			res, err := rl.LookupRefund(ctx, provider.RefundLookupRequest{Key: key, ProviderKey: pkey, ProviderID: pid, ChargeID: chargeID})
			if err != nil || len(res.Refunds) != 1 {
				return err
			}
			p, ok := payments.ProofOfRefund(res.Refunds[0])
			if !ok {
				return nil
			}
			proof = p
		} else {
			proof = payments.Proof{Status: payments.IntentFailed, Reason: "operator: no refund at the provider"}
		}
	} else if w.fakes.Charged(w.provider, key) == 0 {
		proof = payments.Proof{Status: payments.IntentFailed, Reason: "operator: nothing charged at the provider"}
	} else {
		res, err := w.client.Provider(w.provider).Lookup(ctx, provider.LookupRequest{Key: key, ProviderKey: pkey, ProviderID: pid,
			From: created.Add(-time.Hour), To: time.Now().Add(time.Hour)})
		if err != nil || len(res.Charges) != 1 {
			return err
		}
		p, ok := payments.ProofOfCharge(res.Charges[0])
		if !ok || p.Status != payments.IntentSucceeded {
			return nil
		}
		proof = p
	}
	proof.Reason = "operator: " + proof.Reason
	err = w.client.Operator().ResolveReview(ctx, "cus_i", key, proof, nil)
	if errors.Is(err, payments.ErrNotUnderReview) {
		return nil
	}
	return err
}

// pauser pauses one actor at one point, once.
type pauser struct {
	actor, point string
	reached      chan struct{}
	resume       chan struct{}
	once         sync.Once
}

func (p *pauser) hook(ctx context.Context, point, _ string) {
	if point != p.point || crashpoint.Actor(ctx) != p.actor {
		return
	}
	paused := false
	p.once.Do(func() { paused = true })
	if paused {
		close(p.reached)
		<-p.resume
	}
}

// interleaving is one run of the driver.
type interleaving struct {
	s     scenario
	a     actor
	point string
	b     actor
}

func (il interleaving) String() string {
	kind := "charge"
	if il.s.refund {
		kind = "refund"
	}
	return fmt.Sprintf("%s/start-%s/%s@%s/then-%s", kind, il.s.start, il.a.name, il.point, il.b.name)
}

// worlds numbers the worlds.
var worlds atomic.Int64

// pausers are the pausers in force, by actor: the process-wide
// crashpoint hook dispatches to them, so that worlds run in parallel.
var pausers sync.Map // actor name -> *pauser

func init() {
	crashpoint.SetReach(func(ctx context.Context, point, key string) {
		if p, ok := pausers.Load(crashpoint.Actor(ctx)); ok {
			p.(*pauser).hook(ctx, point, key)
		}
	})
}

// pause registers a pauser of actor at point until the returned func.
func pause(actor, point string) (*pauser, func()) {
	p := &pauser{actor: actor, point: point, reached: make(chan struct{}), resume: make(chan struct{})}
	pausers.Store(actor, p)
	return p, func() { pausers.Delete(actor) }
}

// setUp brings the scenario's key to its starting state: a charge (and,
// for a refund, a succeeded charge then its refund) whose first attempt
// met s.start. Its webhooks stay held.
func (w *iworld) setUp(t *testing.T, s scenario) {
	t.Helper()
	ctx := crashpoint.WithActor(context.Background(), w.name+"-setup")
	if s.refund {
		w.transport.set(w.name+"-setup", faultNone)
		if out, err := w.client.Charge(ctx, s.chargeParams(w.provider)); err != nil || out.Status != payments.IntentSucceeded {
			t.Fatalf("setup charge: %+v %v", out, err)
		}
		w.transport.set(w.name+"-setup", s.start)
		_, err := w.client.Refund(ctx, s.refundParams())
		if !payments.OutcomeUnknown(err) {
			t.Fatalf("setup refund meeting %s: %v", s.start, err)
		}
		return
	}
	w.transport.set(w.name+"-setup", s.start)
	if out, err := w.client.Charge(ctx, s.chargeParams(w.provider)); !payments.OutcomeUnknown(err) {
		t.Fatalf("setup charge meeting %s: %+v %v", s.start, out, err)
	}
}

// played is what the two actors of one interleaving did.
type played struct {
	// reached: A reached its point, and B ran while A was paused there.
	// Otherwise A ran to its end alone and B did not run.
	reached    bool
	aErr, bErr error
}

// play sets the scenario up, runs A until it reaches its point, runs B to
// completion while A waits there, resumes A and waits for its end. A that
// ends without reaching its point ends the play.
func (w *iworld) play(t *testing.T, ctx context.Context, il interleaving) played {
	t.Helper()
	w.setUp(t, il.s)
	aName, bName := w.name+"-A-"+il.a.name, w.name+"-B-"+il.b.name
	w.transport.set(aName, il.a.fault)
	w.transport.set(bName, il.b.fault)
	p, unpause := pause(aName, il.point)
	defer unpause()
	aDone := make(chan error, 1)
	go func() { aDone <- il.a.run(crashpoint.WithActor(ctx, aName), w, il.s) }()
	var r played
	select {
	case <-p.reached:
		r.reached = true
		r.bErr = il.b.run(crashpoint.WithActor(ctx, bName), w, il.s)
		close(p.resume)
		r.aErr = <-aDone
	case r.aErr = <-aDone:
	case <-ctx.Done():
		t.Fatalf("%s: A neither reached %s nor finished", il, il.point)
	}
	return r
}

// run plays one interleaving, lets the world converge, checks the promise
// and reports whether A reached its point.
func (w *iworld) run(t *testing.T, il interleaving) (reached bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := w.play(t, ctx, il)
	// A may not reach its point in this state (a retry replaying a
	// settled key, a reconciler with nothing due).
	if r.bErr != nil && !expected(r.bErr) {
		t.Errorf("%s: B: %v", il, r.bErr)
	}
	if r.aErr != nil && !expected(r.aErr) {
		t.Errorf("%s: A: %v", il, r.aErr)
	}
	w.converge(t, ctx, il)
	w.check(t, il)
	return r.reached
}

// expected: what a retry, a reconciler or an operator may answer in these
// stories without anything being wrong (the checks judge the outcome).
func expected(err error) bool {
	var decline *provider.DeclineError
	var invalid *provider.InvalidRequestError
	var review *payments.UnderReviewError
	return payments.OutcomeUnknown(err) || idempotency.SafeToRetry(err) || errors.Is(err, idempotency.ErrInProgress) ||
		errors.Is(err, provider.ErrCredentials) ||
		errors.As(err, &decline) || errors.As(err, &invalid) || errors.As(err, &review)
}

// converge lets the world settle the key: held webhooks delivered, a
// client retry with the provider answering, reconciler runs, the
// operator deciding a review; until the intent is final.
func (w *iworld) converge(t *testing.T, ctx context.Context, il interleaving) {
	t.Helper()
	ctx = crashpoint.WithActor(ctx, "converge")
	w.transport.set("converge", faultNone)
	for range 12 {
		if err := w.deliver(ctx); err != nil {
			t.Fatalf("%s: deliver: %v", il, err)
		}
		switch st := w.status(t, il.s); st {
		case payments.IntentSucceeded, payments.IntentFailed, payments.IntentDeclined:
			return
		case payments.IntentNeedsReview:
			if err := w.operate(ctx, il.s); err != nil {
				t.Fatalf("%s: operator: %v", il, err)
			}
			continue
		}
		if err := retry(faultNone).run(ctx, w, il.s); err != nil && !expected(err) {
			t.Fatalf("%s: converging retry: %v", il, err)
		}
		if isOpen(w.status(t, il.s)) {
			if _, err := w.recon.RunOnce(ctx); err != nil {
				t.Fatalf("%s: converging reconciler: %v", il, err)
			}
		}
	}
	t.Errorf("%s: the intent is still %s after the world converged", il, w.status(t, il.s))
}

func (w *iworld) status(t *testing.T, s scenario) payments.IntentStatus {
	t.Helper()
	var st string
	if err := w.pool.QueryRow(context.Background(), `SELECT status FROM payment_intents WHERE idempotency_key = $1 AND user_id = 'cus_i'`,
		s.composed()).Scan(&st); err != nil {
		t.Fatalf("status: %v", err)
	}
	return payments.IntentStatus(st)
}

// check asserts the promise for the scenario's key against the fake's
// records.
func (w *iworld) check(t *testing.T, il interleaving) {
	t.Helper()
	key := il.s.composed()
	st := w.status(t, il.s)
	var entries int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_entries WHERE key = $1`, key).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	moved, objects := 0, 0
	if il.s.refund {
		objects = w.fakes.Refunds(w.provider, key)
		moved = objects
	} else {
		objects = w.fakes.Charges(w.provider, key)
		moved = w.fakes.Charged(w.provider, key)
	}
	switch {
	case moved > 1 || objects > 1:
		t.Errorf("%s: %d provider objects (%d moved money) for one key: charged twice", il, objects, moved)
	case moved == 1 && st != payments.IntentSucceeded:
		t.Errorf("%s: money moved at the provider but the intent is %s", il, st)
	case moved == 0 && st == payments.IntentSucceeded:
		t.Errorf("%s: intent SUCCEEDED with no money at the provider", il)
	case entries != moved:
		t.Errorf("%s: %d ledger entries for %d provider movements", il, entries, moved)
	}
}

// booksEqual asserts the ledger's cash account equals the provider's net
// per currency.
func (w *iworld) booksEqual(t *testing.T) {
	t.Helper()
	net, err := w.fakes.NetAmounts(w.provider)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(w.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for cur, m := range net {
		got, err := l.Balance(context.Background(), ledger.ProviderCash(w.provider), money.Currency(cur))
		if err != nil || !got.Equal(m) {
			t.Errorf("%s books: ledger cash %s %s (%v), provider net %s", w.provider, got.AmountString(), cur, err, m.AmountString())
		}
	}
}

// TestInterleavings runs the driver over every pair of actors, every pause
// point of the first, both starting states, charges and refunds, and the
// three providers. INTERLEAVE_PROVIDERS (comma-separated) narrows it while
// working on one provider.
func TestInterleavings(t *testing.T) {
	providers := []string{"stripe", "adyen", "paypal"}
	if v := os.Getenv("INTERLEAVE_PROVIDERS"); v != "" {
		providers = strings.Split(v, ",")
	}
	actors := []actor{retry(faultNone), retry(faultLost), retry(fault403), actorReconcile, actorWebhook, actorOperator}
	var ran, reached atomic.Int64
	t.Cleanup(func() {
		t.Logf("interleavings: %d run, %d with actor A paused at its point", ran.Load(), reached.Load())
	})
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			w := newIWorld(t, provider)
			n := 0
			for _, refund := range []bool{false, true} {
				for _, start := range []fault{faultLost, fault5xx} {
					for _, a := range actors {
						for _, point := range a.points {
							for _, b := range actors {
								n++
								s := scenario{refund: refund, start: start, key: fmt.Sprintf("il-%d", n), charge: fmt.Sprintf("il-%d", n)}
								if refund {
									s.key = fmt.Sprintf("il-%d-refund", n)
								}
								il := interleaving{s: s, a: a, point: point, b: b}
								ran.Add(1)
								if w.run(t, il) {
									reached.Add(1)
								}
								if t.Failed() && os.Getenv("INTERLEAVE_ALL") == "" {
									t.FailNow()
								}
							}
						}
					}
				}
			}
			w.booksEqual(t)
		})
	}
}

func isOpen(st payments.IntentStatus) bool {
	return st == payments.IntentPending || st == payments.IntentUnknown || st == payments.IntentRequiresAction
}
