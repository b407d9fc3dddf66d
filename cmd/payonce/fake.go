package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/payonce/payonce/providers/stripe/stripetest"
)

const fakeUsage = `Usage: payonce fake stripe [--addr 127.0.0.1:12111]

Serves a stateful fake of the provider's API, with its real idempotency
semantics, for tests and demos against a standalone process. Point the
adapter (or stripe-go) at http://ADDR. The ground truth (what really
exists) is at http://ADDR/_fake/counts and /_fake/totals.

Example:
  payonce fake stripe --addr 127.0.0.1:12111
`

func runFake(args []string) error {
	if len(args) == 0 || args[0] != "stripe" {
		fmt.Fprint(os.Stderr, fakeUsage)
		return usageError{"fake needs a provider: stripe (adyen and paypal are not built yet)"}
	}
	fs := flag.NewFlagSet("fake stripe", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, fakeUsage) }
	addr := fs.String("addr", "127.0.0.1:12111", "listen address")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError{err.Error()}
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fake := stripetest.NewUnstartedServer(nil)
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		fake.Close()
	}()
	fmt.Printf("fake stripe: listening on http://%s\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
