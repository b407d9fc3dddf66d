package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
)

type reply struct {
	code     int
	body     string
	replayed bool
	problem  string
}

func post(t *testing.T, url, user, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return reply{}
	}
	req.Header.Set("X-User", user)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{code: resp.StatusCode, body: string(b), replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		r.problem = string(b)
	}
	return r
}

var orderRoutes = []idempotency.Route{{
	Pattern: "POST /orders", Action: "createOrder", RequireKey: true, Fields: []string{"sku", "qty"},
}}

func byUser(r *http.Request) string { return r.Header.Get("X-User") }

// Concurrent retries with one key through the one-call middleware: the
// handler runs once, its row and its response commit together, and every
// retry gets the response byte for byte.
func TestMiddlewareOneCallRunsOnceUnderConcurrentRetries(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku TEXT)`); err != nil {
		t.Fatal(err)
	}
	protect, err := pgstore.Middleware(pool, idempotency.MiddlewareConfig{Scope: byUser, Routes: orderRoutes}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const callers = 8
	var runs atomic.Int64
	inProgress := make(chan struct{}, callers)
	released := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			// Hold the key until every other request has been answered
			// "in progress".
			for range callers - 1 {
				select {
				case <-inProgress:
				case <-time.After(30 * time.Second):
					http.Error(w, "the duplicates never arrived", http.StatusInternalServerError)
					return
				}
			}
		}
		tx, ok := pgstore.TxFromContext(r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO orders (sku) VALUES ('sku-42') RETURNING id`).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order_id":%d}`, id)
	})
	srv := httptest.NewServer(protect(mux))
	defer srv.Close()

	key := "5f2b7c1e-8a4d-4c3b-9e6f-1a2b3c4d5e6f"
	var wg sync.WaitGroup
	var once sync.Once
	replies := make([]reply, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r := post(t, srv.URL+"/orders", "usr_1", key, `{"sku":"sku-42","qty":1}`)
				if r.code == http.StatusConflict && strings.Contains(r.problem, "request-in-progress") {
					select { // the holder counts the first callers-1 of these
					case inProgress <- struct{}{}:
					default:
					}
					<-released
					continue
				}
				replies[i] = r
				once.Do(func() { close(released) }) // the first answer but "in progress" is the handler's
				return
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("orders: %d (%v), want 1", rows, err)
	}
	replayed := 0
	for i, r := range replies {
		if r.code != http.StatusCreated || r.body != replies[0].body {
			t.Fatalf("caller %d got %d %q; caller 0 got %d %q", i, r.code, r.body, replies[0].code, replies[0].body)
		}
		if r.replayed {
			replayed++
		}
	}
	if replayed != callers-1 {
		t.Fatalf("%d replays, want %d", replayed, callers-1)
	}
}

// A database without the schema is refused at construction, with the fix
// named.
func TestMiddlewareOneCallRefusesAMissingSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolURL(t, pgtest.SchemaURL(t)) // an empty schema
	_, err := pgstore.Middleware(pool, idempotency.MiddlewareConfig{Scope: byUser, Routes: orderRoutes}, nil)
	if !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("err = %v, want migrations.ErrNotMigrated", err)
	}
	for _, fix := range []string{"payonce migrate up", "MigrateLines"} {
		if !strings.Contains(err.Error(), fix) {
			t.Errorf("the error does not name the fix %q: %v", fix, err)
		}
	}
}

// The defaults: a guessable key is refused before anything is stored; a
// route's lease and retention are its action's; the handler gets a
// transaction unless NoTx.
func TestMiddlewareOneCallDefaults(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	store := mustStore(t, pool, nil)
	routes := []idempotency.Route{
		{Pattern: "POST /orders", Action: "createOrder"},
		{Pattern: "POST /payouts", Action: "payout"},
		{Pattern: "POST /notes", Action: "note"},
	}
	protect, err := pgstore.Middleware(pool, idempotency.MiddlewareConfig{Scope: byUser, Routes: routes}, &pgstore.MiddlewareOptions{
		Actions: map[string]pgstore.ActionPolicy{
			"payout": {LockTimeout: 2 * time.Minute, Retention: 7 * 24 * time.Hour},
			"note":   {Retention: 24 * time.Hour}, // the defaults, said: shares createOrder's executor
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	leases := map[string]time.Duration{}
	var mu sync.Mutex
	mux := http.NewServeMux()
	handler := func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if _, ok := pgstore.TxFromContext(r.Context()); !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		l, _ := idempotency.LeaseFromContext(r.Context())
		rec, err := store.Get(r.Context(), l.Scope, l.Key) // the claim is committed: visible
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		mu.Lock()
		leases[r.URL.Path] = rec.LockedUntil.Sub(rec.CreatedAt)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}
	mux.HandleFunc("POST /orders", handler)
	mux.HandleFunc("POST /payouts", handler)
	mux.HandleFunc("POST /notes", handler)
	srv := httptest.NewServer(protect(mux))
	defer srv.Close()

	r := post(t, srv.URL+"/orders", "usr_1", "order-1", `{}`)
	if r.code != http.StatusBadRequest || !strings.Contains(r.problem, "idempotency-key-low-entropy") {
		t.Fatalf("a guessable key: %d %s, want 400 idempotency-key-low-entropy", r.code, r.body)
	}
	if runs.Load() != 0 {
		t.Fatal("the handler ran for a guessable key")
	}
	if _, err := store.Get(ctx, "usr_1", "createOrder_order-1"); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("a guessable key left a record: %v", err)
	}

	keys := map[string]string{
		"/orders":  "0b6f3f0e-9d0a-4c1e-8a57-2f1d3c4b5a69",
		"/payouts": "1c7a4e2f-0e1b-4d2f-9b68-3a2e4d5c6b70",
		"/notes":   "2d8b5f30-1f2c-4e30-8c79-4b3f5e6d7c81",
	}
	want := map[string]struct {
		action          string
		lease, retained time.Duration
	}{
		"/orders":  {"createOrder", 30 * time.Second, 24 * time.Hour},
		"/payouts": {"payout", 2 * time.Minute, 7 * 24 * time.Hour},
		"/notes":   {"note", 30 * time.Second, 24 * time.Hour},
	}
	for path, key := range keys {
		if r := post(t, srv.URL+path, "usr_1", key, `{}`); r.code != http.StatusCreated {
			t.Fatalf("%s: %d %s", path, r.code, r.body)
		}
		rec, err := store.Get(ctx, "usr_1", want[path].action+"_"+key)
		if err != nil {
			t.Fatal(err)
		}
		near := func(got, want time.Duration) bool { return got > want-time.Minute && got <= want+time.Second }
		if got := rec.ExpiresAt.Sub(rec.CompletedAt); !near(got, want[path].retained) {
			t.Errorf("%s: retained %s, want %s", path, got, want[path].retained)
		}
		if got := leases[path]; got < want[path].lease-5*time.Second || got > want[path].lease+time.Second {
			t.Errorf("%s: lease %s, want %s", path, got, want[path].lease)
		}
	}

	// NoTx: the handler runs without a transaction of its own.
	plain, err := pgstore.Middleware(pool, idempotency.MiddlewareConfig{Scope: byUser, Routes: routes[:1]},
		&pgstore.MiddlewareOptions{NoTx: true})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(plain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := pgstore.TxFromContext(r.Context())
		fmt.Fprint(w, ok)
	})))
	defer srv2.Close()
	if r := post(t, srv2.URL+"/orders", "usr_2", keys["/orders"], `{}`); r.body != "false" {
		t.Fatalf("NoTx: the handler had a transaction (%d %s)", r.code, r.body)
	}
}

// A bad route table or option is refused, naming the field and the fix.
func TestMiddlewareOneCallRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	cfg := idempotency.MiddlewareConfig{Scope: byUser, Routes: orderRoutes}
	for _, c := range []struct {
		name string
		pool bool
		cfg  idempotency.MiddlewareConfig
		opts *pgstore.MiddlewareOptions
		want string
	}{
		{"nil pool", false, cfg, nil, "pool"},
		{"no scope", true, idempotency.MiddlewareConfig{Routes: orderRoutes}, nil, "MiddlewareConfig.Scope"},
		{"no routes", true, idempotency.MiddlewareConfig{Scope: byUser}, nil, "MiddlewareConfig.Routes"},
		{"pattern without method", true, idempotency.MiddlewareConfig{Scope: byUser, Routes: []idempotency.Route{
			{Pattern: "/orders", Action: "createOrder"}}}, nil, "MiddlewareConfig.Routes[0].Pattern"},
		{"action with underscore", true, idempotency.MiddlewareConfig{Scope: byUser, Routes: []idempotency.Route{
			{Pattern: "POST /orders", Action: "create_order"}}}, nil, "MiddlewareConfig.Routes[0].Action"},
		{"pattern twice", true, idempotency.MiddlewareConfig{Scope: byUser, Routes: []idempotency.Route{
			{Pattern: "POST /orders", Action: "a"}, {Pattern: "POST /orders", Action: "b"}}}, nil, "MiddlewareConfig.Routes[1].Pattern"},
		{"unknown action", true, cfg, &pgstore.MiddlewareOptions{Actions: map[string]pgstore.ActionPolicy{
			"createOrders": {Retention: time.Hour}}}, `MiddlewareOptions.Actions["createOrders"]`},
		{"retention within the lease", true, cfg, &pgstore.MiddlewareOptions{Actions: map[string]pgstore.ActionPolicy{
			"createOrder": {LockTimeout: time.Hour, Retention: time.Minute}}}, `MiddlewareOptions.Actions["createOrder"]`},
		{"replay cache", true, cfg, &pgstore.MiddlewareOptions{Executor: &idempotency.Config{
			ReplayCache: &idempotency.ReplayCache{}}}, "MiddlewareOptions.Executor.ReplayCache"},
	} {
		p := pool
		if !c.pool {
			p = nil
		}
		_, err := pgstore.Middleware(p, c.cfg, c.opts)
		if !errors.Is(err, idempotency.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an *InvalidError naming %s", c.name, err, c.want)
		}
	}
}

// The executor's Do[T] on PostgreSQL: concurrent callers on one key run fn
// once and all get the same decoded value; in WithTx, fn's writes commit
// with the stored value.
func TestDoTypedOnPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	counted := claimCounter{Store: b.store, inProgress: make(chan struct{}, 64)}
	exec, err := idempotency.New(counted, nil)
	if err != nil {
		t.Fatal(err)
	}
	type quote struct {
		ID     string
		Amount string
	}
	const callers = 8
	var runs atomic.Int64
	fn := func(context.Context) (quote, error) {
		runs.Add(1)
		for range callers - 1 { // hold until the key was found in progress as often
			select {
			case <-counted.inProgress:
			case <-time.After(30 * time.Second):
				return quote{}, errors.New("the other callers never met the held key")
			}
		}
		return quote{ID: "q_1", Amount: "49.99"}, nil
	}
	var wg sync.WaitGroup
	got := make([]quote, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = idempotency.Do(ctx, exec, "usr_1", "quote_c1", map[string]string{"cart": "c1"}, fn,
				idempotency.WaitInFlight(time.Minute))
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
	for i := range callers {
		if errs[i] != nil || got[i] != (quote{ID: "q_1", Amount: "49.99"}) {
			t.Fatalf("caller %d: %+v, %v", i, got[i], errs[i])
		}
	}
	if _, err := idempotency.Do(ctx, exec, "usr_1", "quote_c1", map[string]string{"cart": "c2"}, fn); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("another input: %v, want ErrFingerprintMismatch", err)
	}

	// WithTx: the row written through fn's transaction commits with the value.
	if _, err := b.pool.Exec(ctx, `CREATE TABLE quotes (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	txe := mustExecutor(t, b.store, nil)
	write := func(ctx context.Context) (string, error) {
		tx, _ := pgstore.TxFromContext(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO quotes VALUES ('q_2')`) // a second run would violate the key
		return "q_2", err
	}
	for i := 0; i < 2; i++ {
		if v, err := idempotency.Do(ctx, txe.WithTx(), "usr_1", "quote_c2", "c2", write); err != nil || v != "q_2" {
			t.Fatalf("WithTx call %d: %q, %v", i, v, err)
		}
	}
}

// claimCounter reports each claim answered "in progress".
type claimCounter struct {
	idempotency.Store
	inProgress chan struct{}
}

func (s claimCounter) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	c, err := s.Store.Claim(ctx, p)
	if err == nil && c.State == idempotency.ClaimInProgress {
		select {
		case s.inProgress <- struct{}{}:
		default:
		}
	}
	return c, err
}
