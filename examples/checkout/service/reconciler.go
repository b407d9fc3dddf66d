package service

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/reconcile"
)

// defaultReconcileSpec is the payments reconciler's schedule when
// CHECKOUT_RECONCILE_SPEC is unset.
const defaultReconcileSpec = "@every 1m"

// reconcileFrom reads the payments reconciler's variables (see
// ConfigFromEnv): CHECKOUT_RECONCILE_SPEC, CHECKOUT_RECONCILE_GRACE and
// CHECKOUT_RECONCILE_RECHECK. What is unset keeps reconcile's default.
func reconcileFrom(getenv func(string) string) (reconcile.Config, error) {
	cfg := reconcile.Config{Spec: getenv("CHECKOUT_RECONCILE_SPEC")}
	if cfg.Spec == "" {
		cfg.Spec = defaultReconcileSpec
	}
	if cfg.Spec != "off" {
		if err := (&reconcile.Config{Spec: cfg.Spec}).Validate(); err != nil {
			return cfg, fmt.Errorf("checkout: CHECKOUT_RECONCILE_SPEC=%q: %v; a cron schedule such as \"@every 1m\" is expected, or \"off\"", cfg.Spec, err)
		}
	}
	if v := getenv("CHECKOUT_RECONCILE_GRACE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("checkout: CHECKOUT_RECONCILE_GRACE=%q: a positive duration such as 2m is expected", v)
		}
		cfg.Grace = d
	}
	if v := getenv("CHECKOUT_RECONCILE_RECHECK"); v != "" {
		for i, part := range strings.Split(v, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(part))
			if err != nil || d <= 0 {
				return cfg, fmt.Errorf("checkout: CHECKOUT_RECONCILE_RECHECK=%q: entry %d (%q) is not a positive duration; "+
					"comma-separated durations such as 1m,5m,1h are expected", v, i+1, strings.TrimSpace(part))
			}
			cfg.Schedule = append(cfg.Schedule, d)
		}
	}
	return cfg, nil
}

// newReconciler builds the payments reconciler cfg.Reconcile configures,
// or none (nil) when its Spec is "" or "off".
func newReconciler(pool *pgxpool.Pool, client *payments.Client, cfg Config) (*reconcile.Reconciler, error) {
	rc := cfg.Reconcile
	if rc.Spec == "" || rc.Spec == "off" {
		return nil, nil
	}
	if rc.Logger == nil {
		rc.Logger = cfg.Logger
	}
	if rc.MeterProvider == nil {
		rc.MeterProvider = cfg.MeterProvider
	}
	if rc.TracerProvider == nil {
		rc.TracerProvider = cfg.TracerProvider
	}
	r, err := reconcile.New(pool, client, &rc)
	if err != nil {
		return nil, fmt.Errorf("checkout: the payments reconciler: %w", err)
	}
	return r, nil
}
