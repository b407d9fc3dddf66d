package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/reconcile"
)

// reconciled is what the reconciler did in the demo.
type reconciled struct {
	runs, examined, repaired, failedWithProof, needsReview, rescheduled int
	review                                                              []string
	open                                                                int
}

// reconcileAll runs the reconciler, as the demo's instance, until no
// intent is open (40 runs at most), then reads the abandoned payments'
// final states.
func reconcileAll(ctx context.Context, pool *pgxpool.Pool, fk *fakes.Set, pays []*payment, leaks *leakCheck) (reconciled, error) {
	var out reconciled
	env := fk.Env()
	cfg, err := providers.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		return out, err
	}
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	cfg.Logger, cfg.TracerProvider = leaks.logger, leaks.tp
	client, err := providers.NewClient(pool, cfg)
	if err != nil {
		return out, err
	}
	r, err := reconcile.New(pool, client, &reconcile.Config{Instance: "demo", Grace: time.Millisecond, VoidAfter: time.Millisecond,
		Schedule: []time.Duration{200 * time.Millisecond}, MaxChecks: 20, Batch: 1000, Logger: leaks.logger, TracerProvider: leaks.tp})
	if err != nil {
		return out, err
	}
	for out.runs < 40 {
		rep, err := r.RunOnce(ctx)
		leaks.report("the demo's reconciler", rep, err)
		out.runs++
		if err != nil {
			return out, fmt.Errorf("reconciler run: %w", err)
		}
		out.examined += rep.Examined
		out.rescheduled += rep.Rescheduled
		out.repaired += rep.Repaired
		out.failedWithProof += rep.FailedWithProof
		out.needsReview += rep.NeedsReview
		for _, x := range rep.Items {
			if x.Action == reconcile.ActionNeedsReview {
				out.review = append(out.review, x.IntentKey+": "+x.Detail)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = fk.WaitDeliveries(wctx) // Adyen answers a void by webhook
		cancel()
		if err != nil {
			return out, err
		}
		if out.open, err = client.Operator().CountIntents(ctx, payments.IntentPending, payments.IntentUnknown); err != nil {
			return out, err
		}
		if out.open == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The abandoned payments' final states, as payonce recorded them.
	for _, p := range pays {
		if !p.abandoned {
			continue
		}
		if in, err := client.Intent(ctx, p.customer, p.key); err == nil {
			p.status = string(in.Status)
		}
	}
	return out, nil
}
