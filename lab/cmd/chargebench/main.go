// Command chargebench measures what payonce's safety costs on the charge
// path (make chargebench): payments.Client.Charge against the Stripe fake
// with a fixed latency per request, beside a hand-written charge with
// pgx and stripe-go that calls the same fake with a random idempotency key
// and records nothing. For each: charges per second from 8 goroutines,
// p50 and p99, and, measured on sequential charges, database round trips,
// provider requests and allocations per charge.
//
// It reads BENCH_DATABASE_URL (make chargebench starts a durable
// throwaway cluster), CHARGE_SECONDS (default 8) and CHARGE_LATENCY_MS
// (the fake's latency per request, default 20: a card network is slower
// than the database).
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/paymentintent"

	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest/localpg"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

const (
	workers   = 8
	secretKey = "sk_test_chargebench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chargebench:", err)
		os.Exit(1)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// counters counts database round trips (statements, batches, begins and
// commits reach pgx's tracer as queries) and provider requests.
type counters struct{ db, provider atomic.Int64 }

func (c *counters) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.db.Add(1)
	return ctx
}
func (c *counters) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *counters) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.db.Add(1)
	return ctx
}
func (c *counters) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *counters) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

type countingTransport struct {
	c    *counters
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.provider.Add(1)
	return t.next.RoundTrip(r)
}

// path is one way to charge: i numbers the charge (its key).
type path struct {
	name   string
	charge func(ctx context.Context, i int64) error
}

type figures struct {
	tps                  float64
	p50, p99             time.Duration
	db, provider, allocs float64
}

func run() error {
	ctx := context.Background()
	base := os.Getenv("BENCH_DATABASE_URL")
	if base == "" {
		return errors.New("BENCH_DATABASE_URL is not set: run `make chargebench`, which starts a throwaway PostgreSQL")
	}
	seconds, latency := envInt("CHARGE_SECONDS", 8), time.Duration(envInt("CHARGE_LATENCY_MS", 20))*time.Millisecond
	u, err := localpg.FreshSchema(ctx, base, "payonce_chargebench")
	if err != nil {
		return err
	}
	var c counters
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return err
	}
	cfg.MaxConns = workers * 2
	cfg.ConnConfig.Tracer = &c
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return err
	}
	fake := stripetest.NewServer(&stripetest.Config{Faults: []stripetest.Fault{{Kind: stripetest.Latency, Delay: latency, Probability: 1}}})
	defer fake.Close()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: countingTransport{&c, &http.Transport{MaxIdleConnsPerHost: 64}}}

	prov, err := paystripe.New(&paystripe.Config{SecretKey: secretKey, BaseURL: fake.URL(), HTTPClient: hc})
	if err != nil {
		return err
	}
	client, err := payments.New(pool, []provider.Provider{prov}, nil)
	if err != nil {
		return err
	}
	amount := money.MustParse("49.99", money.EUR)
	sdk := path{"payonce Client.Charge", func(ctx context.Context, i int64) error {
		out, err := client.Charge(ctx, payments.ChargeParams{Scope: "cus_bench", Key: "order-" + strconv.FormatInt(i, 10),
			Provider: "stripe", Amount: amount, Recipient: "acct_bench", PaymentMethod: "pm_card_visa"})
		if err == nil && out.Status != payments.IntentSucceeded {
			err = fmt.Errorf("status %s", out.Status)
		}
		return err
	}}
	paymentIntents := paymentintent.Client{Key: secretKey, B: stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL: stripego.String(fake.URL()), HTTPClient: hc, MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull}})}
	raw := path{"hand-written pgx + stripe-go", func(ctx context.Context, _ int64) error {
		// What a service without payonce does: one read of its own, then
		// the provider call with a fresh key; nothing recorded.
		var one int
		if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			return err
		}
		p := &stripego.PaymentIntentParams{Amount: stripego.Int64(4999), Currency: stripego.String("eur"),
			PaymentMethod: stripego.String("pm_card_visa"), Confirm: stripego.Bool(true)}
		p.SetIdempotencyKey(uuid.NewString())
		p.Context = ctx
		pi, err := paymentIntents.New(p)
		if err == nil && pi.Status != stripego.PaymentIntentStatusSucceeded {
			err = fmt.Errorf("status %s", pi.Status)
		}
		return err
	}}

	fmt.Printf("chargebench: Stripe fake with %s per request, %d goroutines, %ds per path\n", latency, workers, seconds)
	var seq atomic.Int64
	results := map[string]figures{}
	for _, p := range []path{raw, sdk} {
		// Per charge, sequentially: round trips and allocations.
		const n = 200
		runtime.GC()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		db0, pr0 := c.db.Load(), c.provider.Load()
		for range n {
			if err := p.charge(ctx, seq.Add(1)); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
		}
		runtime.ReadMemStats(&ms1)
		f := figures{db: float64(c.db.Load()-db0) / n, provider: float64(c.provider.Load()-pr0) / n,
			allocs: float64(ms1.Mallocs-ms0.Mallocs) / n}
		// Throughput and latency, concurrently.
		deadline := time.Now().Add(time.Duration(seconds) * time.Second)
		lat := make([][]time.Duration, workers)
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					t0 := time.Now()
					if err := p.charge(ctx, seq.Add(1)); err != nil {
						failed.Store(&err)
						return
					}
					lat[w] = append(lat[w], time.Since(t0))
				}
			}()
		}
		wg.Wait()
		if e := failed.Load(); e != nil {
			return fmt.Errorf("%s: %w", p.name, *e)
		}
		all := slices.Concat(lat...)
		slices.Sort(all)
		f.tps = float64(len(all)) / float64(seconds)
		f.p50, f.p99 = all[len(all)/2], all[len(all)*99/100]
		results[p.name] = f
		fmt.Printf("%-30s %7.0f/s  p50 %8s  p99 %8s  db round trips %4.1f  provider requests %3.1f  allocs %6.0f per charge (the in-process fake's included)\n",
			p.name, f.tps, f.p50.Round(10*time.Microsecond), f.p99.Round(10*time.Microsecond), f.db, f.provider, f.allocs)
	}
	s, r := results[sdk.name], results[raw.name]
	fmt.Printf("\npayonce adds %s at p50 (%.0f%%) and %.1f database round trips per charge; throughput sdk/raw %.2f\n",
		(s.p50 - r.p50).Round(10*time.Microsecond), 100*float64(s.p50-r.p50)/float64(r.p50), s.db-r.db, s.tps/r.tps)
	fmt.Printf("ratio charge sdk/raw=%.2f\n", s.tps/r.tps)
	return nil
}
