package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers"
)

// constantRetry retries a failed job after a fixed delay (the demo's;
// River's default backs off from seconds to weeks).
type constantRetry time.Duration

func (d constantRetry) NextRetry(*rivertype.JobRow) time.Time {
	return time.Now().Add(time.Duration(d))
}

type errWriter struct{}

func (errWriter) Write(p []byte) (int, error) { return os.Stderr.Write(p) }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is required")
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	// 16 River workers, River's own maintenance and the inbox: pgx's
	// default of 4 connections would make jobs queue for one.
	pcfg.MaxConns = max(pcfg.MaxConns, 24)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := Setup(ctx, pool); err != nil {
		return err
	}
	var pay *payments.Client
	if cfg, err := providers.FromEnv(os.Getenv); err != nil {
		return err
	} else if len(cfg.ProviderNames()) > 0 {
		if pay, err = providers.NewClient(pool, cfg); err != nil {
			return err
		}
	}
	cfg := Config{Payments: pay}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"WORKER_JOB_TIMEOUT", &cfg.JobTimeout}, {"WORKER_RESCUE_AFTER", &cfg.RescueStuckJobsAfter}, {"WORKER_RETRY_DELAY", nil}} {
		v := os.Getenv(d.name)
		if v == "" {
			continue
		}
		dur, err := time.ParseDuration(v)
		if err != nil || dur <= 0 {
			return fmt.Errorf("%s=%q: a positive Go duration", d.name, v)
		}
		if d.dst != nil {
			*d.dst = dur
		} else {
			cfg.RetryPolicy = constantRetry(dur)
		}
	}
	client, err := NewClient(pool, cfg)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8081"
	}
	srv := &http.Server{Addr: addr, Handler: jobsHandler(client), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("worker: listening on http://%s (POST /jobs/order, /jobs/charge); working River jobs\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Stop(sctx)
}

// jobsHandler inserts jobs: POST /jobs/order, POST /jobs/charge (JSON of
// OrderArgs, ChargeArgs), answering the job's id.
func jobsHandler(client *river.Client[pgx.Tx]) http.Handler {
	mux := http.NewServeMux()
	insert := func(w http.ResponseWriter, r *http.Request, args river.JobArgs) {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(args); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		res, err := client.Insert(r.Context(), args, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]any{"job_id": res.Job.ID})
	}
	mux.HandleFunc("POST /jobs/order", func(w http.ResponseWriter, r *http.Request) { insert(w, r, &OrderArgs{}) })
	mux.HandleFunc("POST /jobs/charge", func(w http.ResponseWriter, r *http.Request) { insert(w, r, &ChargeArgs{}) })
	return mux
}
