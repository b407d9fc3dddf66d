package saga_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/saga"
)

func TestMain(m *testing.M) {
	if os.Getenv(envCrashPoint) != "" {
		crashChild()
		return
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

const scope = "usr-7fQ9x"

// order is the checkout saga's input.
type order struct {
	Item   string `json:"item"`
	Amount int    `json:"amount"`
	// FailShip makes the ship step fail permanently.
	FailShip bool `json:"fail_ship,omitempty"`
}

// effectsDDL is the table of the checkout's local effects: one row per
// effect, no unique key, so that a duplicate effect would show.
const effectsDDL = `CREATE TABLE saga_test_effects (
    id   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    op   TEXT NOT NULL,
    key  TEXT NOT NULL
)`

// checkout is the three-step saga of the tests: reserve (local), charge
// (remote), ship (local), the first two with compensations. j, when not
// nil, journals the calls that succeeded, in order.
func checkout(remoteURL string, j *journal) saga.Definition {
	local := func(ctx context.Context, c *saga.Call, op string) error {
		_, err := c.Tx.Exec(ctx, `INSERT INTO saga_test_effects (op, key) VALUES ($1, $2)`, op, c.Key)
		if err == nil {
			j.add(op)
		}
		return err
	}
	return saga.Definition{Name: "checkout", Steps: []saga.Step{
		{Name: "reserve", Kind: saga.Local,
			Action: func(ctx context.Context, c *saga.Call) (any, error) {
				var o order
				if err := c.DecodeInput(&o); err != nil {
					return nil, saga.Fail(err)
				}
				return map[string]string{"reservation": c.Key, "item": o.Item}, local(ctx, c, "reserve")
			},
			Compensate: func(ctx context.Context, c *saga.Call) error { return local(ctx, c, "unreserve") }},
		{Name: "charge", Kind: saga.Remote,
			Action: func(ctx context.Context, c *saga.Call) (any, error) {
				id, err := callRemote(ctx, remoteURL, "charge", c.Key, "")
				if err != nil {
					return nil, err
				}
				j.add("charge")
				return map[string]string{"charge_id": id}, nil
			},
			Compensate: func(ctx context.Context, c *saga.Call) error {
				var ch struct {
					ChargeID string `json:"charge_id"`
				}
				if err := c.DecodeOutput("charge", &ch); err != nil {
					return saga.Fail(err)
				}
				_, err := callRemote(ctx, remoteURL, "refund", c.Key, ch.ChargeID)
				if err == nil {
					j.add("refund")
				}
				return err
			}},
		{Name: "ship", Kind: saga.Local,
			Action: func(ctx context.Context, c *saga.Call) (any, error) {
				var o order
				if err := c.DecodeInput(&o); err != nil {
					return nil, saga.Fail(err)
				}
				if o.FailShip {
					return nil, saga.Fail(errors.New("address undeliverable"))
				}
				return map[string]string{"shipment": c.Key}, local(ctx, c, "ship")
			}},
	}}
}

// journal records calls that succeeded, in order.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(op string) {
	if j == nil {
		return
	}
	j.mu.Lock()
	j.entries = append(j.entries, op)
	j.mu.Unlock()
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.entries...)
}

var remoteClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// callRemote calls the remote fake: op for key (a refund names its
// charge). Its answers map to the step error classes.
func callRemote(ctx context.Context, base, op, key, charge string) (string, error) {
	u := base + "/" + op + "?" + url.Values{"key": {key}, "charge": {charge}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := remoteClient.Do(req)
	if err != nil {
		return "", saga.Unknown(err) // it may have arrived
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return string(body), nil
	case http.StatusServiceUnavailable:
		return "", errors.New("remote: unavailable")
	case http.StatusGatewayTimeout:
		return "", saga.Unknown(errors.New("remote: response lost"))
	case http.StatusUnprocessableEntity:
		return "", saga.Fail(fmt.Errorf("remote: %s", body))
	}
	return "", fmt.Errorf("remote: status %d", resp.StatusCode)
}

// Faults the remote fake injects, one per call, queued per (op, key).
const (
	faultTransient = "transient" // 503, nothing done
	faultUnknown   = "unknown"   // done, then the answer is lost (504)
	faultPermanent = "permanent" // 422 (a decline), nothing done
)

// remote is a stateful fake of a remote service that is idempotent by
// key: the first call with a key has the effect, later ones answer it
// again. It counts one effect per key, so a step that sent new keys on
// retry would show more effects than calls that succeeded.
type remote struct {
	srv     *httptest.Server
	delay   time.Duration
	mu      sync.Mutex
	effects map[string]string // op/key -> effect id
	calls   map[string]int    // op/key -> calls
	faults  map[string][]string
}

func newRemote(t testing.TB) *remote {
	r := &remote{effects: map[string]string{}, calls: map[string]int{}, faults: map[string][]string{}}
	r.srv = httptest.NewServer(r)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *remote) URL() string { return r.srv.URL }

// fail queues faults for the next calls of op with key.
func (r *remote) fail(op, key string, faults ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults[op+"/"+key] = append(r.faults[op+"/"+key], faults...)
}

func (r *remote) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	time.Sleep(r.delay)
	op, key, charge := strings.TrimPrefix(req.URL.Path, "/"), req.URL.Query().Get("key"), req.URL.Query().Get("charge")
	r.mu.Lock()
	defer r.mu.Unlock()
	k := op + "/" + key
	r.calls[k]++
	var fault string
	if q := r.faults[k]; len(q) > 0 {
		fault, r.faults[k] = q[0], q[1:]
	}
	switch {
	case fault == faultTransient:
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case fault == faultPermanent:
		http.Error(w, "declined", http.StatusUnprocessableEntity)
		return
	case op == "refund" && !r.hasEffect("charge", charge):
		http.Error(w, "no such charge", http.StatusUnprocessableEntity)
		return
	}
	id, ok := r.effects[k]
	if !ok {
		id = fmt.Sprintf("%s_%d", op, len(r.effects)+1)
		r.effects[k] = id
	}
	if fault == faultUnknown {
		w.WriteHeader(http.StatusGatewayTimeout)
		return
	}
	_, _ = io.WriteString(w, id)
}

func (r *remote) hasEffect(op, id string) bool {
	for k, v := range r.effects {
		if strings.HasPrefix(k, op+"/") && v == id {
			return true
		}
	}
	return false
}

// applied returns the keys with which op had its effect.
func (r *remote) applied(op string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for k := range r.effects {
		if key, ok := strings.CutPrefix(k, op+"/"); ok {
			keys = append(keys, key)
		}
	}
	return keys
}

func (r *remote) callsOf(op, key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[op+"/"+key]
}

// bundle is one test's world: a migrated schema, the remote fake and an
// orchestrator with the checkout saga registered.
type bundle struct {
	url     string
	pool    *pgxpool.Pool
	remote  *remote
	journal *journal
	orch    *saga.Orchestrator
}

func setup(t *testing.T, cfg *saga.Config) *bundle {
	t.Helper()
	b := &bundle{url: pgtest.MigratedURL(t), remote: newRemote(t), journal: &journal{}}
	b.pool = pgtest.PoolURL(t, b.url)
	if _, err := b.pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	b.orch = b.orchestrator(t, cfg)
	return b
}

// orchestrator returns another orchestrator on b's database (another
// process, as far as the saga knows) with the checkout saga.
func (b *bundle) orchestrator(t *testing.T, cfg *saga.Config) *saga.Orchestrator {
	t.Helper()
	if cfg == nil {
		cfg = &saga.Config{LockTimeout: 2 * time.Second, CompensationBackoff: time.Millisecond}
	}
	o, err := saga.New(b.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Register(checkout(b.remote.URL(), b.journal)); err != nil {
		t.Fatal(err)
	}
	return o
}

func (b *bundle) params(key string, o order) saga.RunParams {
	return saga.RunParams{Saga: "checkout", Scope: scope, Key: key, Input: o}
}

// localEffects counts the local effects op had.
func (b *bundle) localEffects(t testing.TB, op string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM saga_test_effects WHERE op = $1`, op).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// effects are the effects of one saga, local and remote, by operation.
type effects struct{ reserve, charge, ship, refund, unreserve int }

func (b *bundle) effects(t testing.TB) effects {
	return effects{reserve: b.localEffects(t, "reserve"), charge: len(b.remote.applied("charge")), ship: b.localEffects(t, "ship"),
		refund: len(b.remote.applied("refund")), unreserve: b.localEffects(t, "unreserve")}
}

var (
	completedEffects  = effects{reserve: 1, charge: 1, ship: 1}
	rolledBackEffects = effects{reserve: 1, charge: 1, refund: 1, unreserve: 1}
)

func (b *bundle) state(t testing.TB, key string) saga.Saga {
	t.Helper()
	s, err := b.orch.State(context.Background(), scope, key)
	if err != nil {
		t.Fatalf("state of %s: %v", key, err)
	}
	return s
}

// stepStatuses lists a saga's step statuses in order.
func stepStatuses(s saga.Saga) []saga.StepStatus {
	out := make([]saga.StepStatus, len(s.Steps))
	for i, st := range s.Steps {
		out[i] = st.Status
	}
	return out
}

func equalStatuses(got []saga.StepStatus, want ...saga.StepStatus) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
