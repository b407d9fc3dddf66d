package service_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/providers/fakes"
)

// The payments reconciler's variables: it runs every minute unless told
// otherwise, "off" runs none, the grace and the delays between checks are
// read as Go durations, and a malformed value is refused naming its
// variable.
func TestReconcilerEnvironment(t *testing.T) {
	t.Parallel()
	from := func(vars map[string]string) (service.Config, error) {
		env := map[string]string{"STRIPE_API_BASE": "http://127.0.0.1:1", "STRIPE_SECRET_KEY": fakes.StripeSecretKey}
		for k, v := range vars {
			env[k] = v
		}
		return service.ConfigFrom(func(k string) string { return env[k] })
	}
	cfg, err := from(nil)
	if err != nil || cfg.Reconcile.Spec != "@every 1m" || cfg.Reconcile.Grace != 0 || cfg.Reconcile.Schedule != nil {
		t.Fatalf("defaults: %+v %v", cfg.Reconcile, err)
	}
	cfg, err = from(map[string]string{"CHECKOUT_RECONCILE_SPEC": "*/30 * * * * *", "CHECKOUT_RECONCILE_GRACE": "45s",
		"CHECKOUT_RECONCILE_RECHECK": "30s, 2m,1h"})
	if err != nil || cfg.Reconcile.Spec != "*/30 * * * * *" || cfg.Reconcile.Grace != 45*time.Second ||
		!slices.Equal(cfg.Reconcile.Schedule, []time.Duration{30 * time.Second, 2 * time.Minute, time.Hour}) {
		t.Fatalf("set: %+v %v", cfg.Reconcile, err)
	}
	if cfg, err = from(map[string]string{"CHECKOUT_RECONCILE_SPEC": "off"}); err != nil || cfg.Reconcile.Spec != "off" {
		t.Fatalf("off: %+v %v", cfg.Reconcile, err)
	}
	for name, value := range map[string]string{
		"CHECKOUT_RECONCILE_SPEC":    "every minute",
		"CHECKOUT_RECONCILE_GRACE":   "-1m",
		"CHECKOUT_RECONCILE_RECHECK": "1m,,5m",
	} {
		if _, err := from(map[string]string{name: value}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v, want an error naming the variable", name, value, err)
		}
	}
}
