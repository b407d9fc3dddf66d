// Command orders is a small HTTP service protected by payonce's idempotency
// middleware: every POST /orders with the same Idempotency-Key creates at
// most one order, whatever the retries, double clicks or crashes.
//
// Configuration, by environment only:
//
//	ADDR                      listen address (default 127.0.0.1:8080)
//	DATABASE_URL              PostgreSQL (default: a throwaway local cluster)
//	IDEMPOTENCY_RETENTION     how long outcomes are replayed (Go duration, default 24h)
//	IDEMPOTENCY_LOCK_TIMEOUT  lease of a request in progress (Go duration, default 30s)
//
// Authentication is a demo: "Authorization: Bearer <user>" makes <user> the
// scope. The Idempotency-Key is a UUIDv4 or a ULID (a guessable key such as
// "order-1" is answered 400); each user's keys are their own.
//
//	POST /orders        {"sku": "sku_1", "qty": 2, "amount": "49.99", "currency": "EUR"}
//	                    201 {"order_id": 1, ...}; ?work=2s sleeps before writing
//	GET  /orders/count  {"count": N} for the caller
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest/localpg"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

type config struct {
	addr        string
	databaseURL string
	retention   time.Duration
	lockTimeout time.Duration
	// wrap, when set, wraps the idempotency Doer (tests inject faults).
	wrap func(idempotency.Doer) idempotency.Doer
}

func configFromEnv() (config, error) {
	c := config{addr: os.Getenv("ADDR"), databaseURL: os.Getenv("DATABASE_URL"), retention: 24 * time.Hour, lockTimeout: 30 * time.Second}
	if c.addr == "" {
		c.addr = "127.0.0.1:8080"
	}
	for name, dst := range map[string]*time.Duration{"IDEMPOTENCY_RETENTION": &c.retention, "IDEMPOTENCY_LOCK_TIMEOUT": &c.lockTimeout} {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("%s=%q is not a positive Go duration (e.g. 30s, 24h)", name, v)
			}
			*dst = d
		}
	}
	return c, nil
}

func run() error {
	cfg, err := configFromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.databaseURL == "" {
		c, err := localpg.Start(ctx, localpg.Options{Fast: true})
		if err != nil {
			return err
		}
		defer c.Stop()
		cfg.databaseURL = c.URL
		slog.Info("started a throwaway PostgreSQL", "port", c.Port)
	}
	pool, err := pgxpool.New(ctx, cfg.databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	h, err := newServer(ctx, pool, cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("orders: listening on http://%s\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

const ordersDDL = `CREATE TABLE IF NOT EXISTS orders (
    id          BIGSERIAL    PRIMARY KEY,
    scope       TEXT         NOT NULL,
    sku         TEXT         NOT NULL,
    qty         INT          NOT NULL CHECK (qty > 0),
    amount      NUMERIC      NOT NULL CHECK (amount > 0),
    currency    CHAR(3)      NOT NULL,
    created_at  TIMESTAMPTZ  NOT NULL DEFAULT now()
)`

// newServer migrates the database and returns the protected handler.
func newServer(ctx context.Context, pool *pgxpool.Pool, cfg config) (http.Handler, error) {
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, ordersDDL); err != nil {
		return nil, err
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return nil, err
	}
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{LockTimeout: cfg.lockTimeout, Retention: cfg.retention})
	if err != nil {
		return nil, err
	}
	// 100 new keys per user per minute, counted in the database so that
	// every instance of the service shares the limit.
	limiter, err := pgstore.NewLimiter(pool, 100, time.Minute)
	if err != nil {
		return nil, err
	}
	var doer idempotency.Doer = exec.WithTx()
	if cfg.wrap != nil {
		doer = cfg.wrap(doer)
	}
	protect, err := idempotency.Middleware(doer, idempotency.MiddlewareConfig{
		Scope:   bearer,
		Limiter: limiter,
		Routes: []idempotency.Route{{
			Pattern: "POST /orders", Action: "createOrder", RequireKey: true,
			Fields: []string{"sku", "qty", "amount", "currency"},
		}},
		Logger: slog.Default(),
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", createOrder)
	mux.HandleFunc("GET /orders/count", func(w http.ResponseWriter, r *http.Request) {
		scope := bearer(r)
		if scope == "" {
			http.Error(w, `{"error":"unauthenticated"}`, http.StatusUnauthorized)
			return
		}
		var n int64
		if err := pool.QueryRow(r.Context(), `SELECT count(*) FROM orders WHERE scope = $1`, scope).Scan(&n); err != nil {
			http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, http.StatusOK, map[string]int64{"count": n})
	})
	return protect(mux), nil
}

// bearer is the demo authentication: "Authorization: Bearer <user>".
func bearer(r *http.Request) string {
	user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(user)
}

type orderIn struct {
	SKU      string      `json:"sku"`
	Qty      int         `json:"qty"`
	Amount   json.Number `json:"amount"`
	Currency string      `json:"currency"`
}

func createOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	tx, ok := pgstore.TxFromContext(ctx)
	if !ok {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "not running under the idempotency middleware"})
		return
	}
	var in orderIn
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
		return
	}
	amount, err := idempotency.CanonicalDecimal(in.Amount.String())
	switch {
	case in.SKU == "":
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "sku is required"})
		return
	case in.Qty <= 0:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "qty must be positive"})
		return
	case err != nil || strings.HasPrefix(amount, "-") || amount == "0":
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "amount must be a positive decimal string"})
		return
	case len(in.Currency) != 3 || strings.ToUpper(in.Currency) != in.Currency:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "currency must be a 3-letter ISO code"})
		return
	}
	if work := r.URL.Query().Get("work"); work != "" {
		d, err := time.ParseDuration(work)
		if err != nil || d < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "work must be a Go duration"})
			return
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "cancelled"})
			return
		}
	}
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO orders (scope, sku, qty, amount, currency) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		bearer(r), in.SKU, in.Qty, amount, in.Currency).Scan(&id)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "could not create the order"})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"order_id": id, "sku": in.SKU, "qty": in.Qty, "amount": amount, "currency": in.Currency})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
