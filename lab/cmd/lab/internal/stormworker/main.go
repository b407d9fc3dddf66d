// Command stormworker is the worker process of payonce demo: the checkout
// example's service (examples/checkout/service), configured by the
// environment like examples/checkout, with the demo's settings: a 2s lease
// (a killed worker's payments are retried soon), provider calls without
// keep-alive connections (lost responses reach payonce instead of being
// resent by net/http), error logs only, and a receiver that refuses the
// share PAYONCE_DEMO_LOSE_WEBHOOKS of the providers' notifications. It
// listens on ADDR and prints "worker: listening on URL" once it serves.
//
// payonce demo builds it and runs it as a child process that it kills
// (SIGKILL) and restarts mid-storm. It lives apart from cmd/payonce so
// that the operator CLI links no example code.
//
// With PAYONCE_DEMO_LOG_DIR set, the worker also writes every record it
// logs, at every level, and every span it traces, as JSON lines to
// worker-<pid>.jsonl in that directory, where the demo looks for full
// idempotency keys (none may be there: package keyscan).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/lab/internal/keyscan"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "payonce:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := service.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.LockTimeout = 2 * time.Second
	// Lost responses must reach payonce: no keep-alive resends.
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if dir := os.Getenv("PAYONCE_DEMO_LOG_DIR"); dir != "" {
		sink, err := keyscan.OpenSink(filepath.Join(dir, fmt.Sprintf("worker-%d.jsonl", os.Getpid())), os.Stderr)
		if err != nil {
			return err
		}
		defer sink.Close()
		// Every component logs to it, the ones that use slog's default
		// logger too, and traces to it.
		cfg.Logger, cfg.TracerProvider = sink.Logger, sink.TracerProvider
		slog.SetDefault(sink.Logger)
	}
	svc, err := service.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	l, err := net.Listen("tcp", os.Getenv("ADDR"))
	if err != nil {
		return err
	}
	// A flaky receiver: the demo refuses a share of the providers'
	// notifications with 503, as a receiver briefly unable to store them
	// would; the providers redeliver (a few times, in the fakes).
	handler := svc.Handler()
	if v := os.Getenv("PAYONCE_DEMO_LOSE_WEBHOOKS"); v != "" {
		share, err := strconv.ParseFloat(v, 64)
		if err != nil || share < 0 || share > 1 {
			return fmt.Errorf("PAYONCE_DEMO_LOSE_WEBHOOKS=%q: a share between 0 and 1", v)
		}
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 7))
		inner := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/webhooks/") {
				mu.Lock()
				lose := rng.Float64() < share
				mu.Unlock()
				if lose {
					_, _ = io.Copy(io.Discard, r.Body)
					http.Error(w, "receiver unavailable (demo)", http.StatusServiceUnavailable)
					return
				}
			}
			inner.ServeHTTP(w, r)
		})
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Printf("worker: listening on http://%s\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
