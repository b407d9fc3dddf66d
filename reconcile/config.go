package reconcile

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/internal/schedule"
)

// Redrive is what the reconciler does with an intent a consistent lookup
// proved to have left nothing at the provider.
type Redrive int

const (
	// FailWithProof fails the intent with that proof (the default).
	FailWithProof Redrive = iota
	// NewAttempt reopens the intent under the next attempt number: the
	// next retry of its key calls the provider with new derived
	// references (the old ones are proven void). Once per intent: a
	// reopened attempt nobody retries fails with the proof when its
	// checks run out.
	NewAttempt
)

// Config configures a [Reconciler]. The zero value means defaults.
type Config struct {
	// Instance names this reconciler in claims and runs. Default
	// "<hostname>-<pid>".
	Instance string
	// Grace is how long an open intent is left to its caller (and its
	// retries) before the reconciler looks at it. Default 2m.
	Grace time.Duration
	// ActionGrace is how long an intent waiting for the customer
	// (REQUIRES_ACTION: 3-D Secure) is left alone before the reconciler
	// looks at it. Default 24h.
	ActionGrace time.Duration
	// Schedule is the delay before each next check of an intent without a
	// conclusive answer (backoff): the n-th check waits Schedule[n]
	// (the last entry repeats). Default 1m, 5m, 1h, 6h, 24h.
	Schedule []time.Duration
	// MaxChecks is how many checks an intent gets before an inconclusive
	// one makes it NEEDS_REVIEW. A provider outage never does by itself,
	// but it is counted (so that the backoff grows). Default 6.
	MaxChecks int
	// Batch is how many intents one run examines at most. Default 100.
	Batch int
	// ClaimTTL is how long a run holds the intents it examines; a crashed
	// reconciler's claims expire after it. Default 5m.
	ClaimTTL time.Duration
	// VerifyWithin: charges that succeeded locally within this window (and
	// at least Grace ago) are checked once against the provider. Default
	// 24h.
	VerifyWithin time.Duration
	// VerifyBatch bounds those checks per run. Default 50.
	VerifyBatch int
	// DriftWindow and DriftLag: every DriftEvery, the money each provider
	// implementing provider.Totaler moved in [now-DriftLag-DriftWindow,
	// now-DriftLag) is compared per currency with the ledger's entries of
	// the intents created in that window. Defaults 24h, 4h (PayPal's
	// transaction search lags up to 3h), 1h.
	DriftWindow, DriftLag, DriftEvery time.Duration
	// StuckAfter reports idempotency records still PROCESSING this long
	// after their lease ended. Default 5m.
	StuckAfter time.Duration
	// VoidAfter is how long to wait for a late AUTHORISATION before
	// voiding an attempt by its reference (providers implementing
	// provider.Voider: Adyen's technical cancel). Default 30m.
	VoidAfter time.Duration
	// Redrive says what becomes of an intent proven to have left nothing
	// at the provider. Default FailWithProof: a client that wants to pay
	// again uses a new key.
	Redrive Redrive
	// Spec is the cron schedule of [Reconciler.Start] (five fields, six
	// with seconds, or a descriptor such as "@every 1m"). Default
	// "@every 1m".
	Spec string
	// Logger receives run summaries (one "reconcile: run" line per run,
	// with its counts) and failures. Default: [slog.Default] as it is
	// when New runs, so that a service's own logger shows them; set
	// slog.New(slog.DiscardHandler) to silence them.
	Logger *slog.Logger
	// MeterProvider receives the reconcile instruments. Default: no-op.
	MeterProvider metric.MeterProvider
	// TracerProvider receives spans: reconcile.run around each run and
	// reconcile.examine around each intent examined (its key as a short
	// hash, kind, provider and what was done), with the payments client's
	// provider calls inside. Default: no spans.
	TracerProvider trace.TracerProvider
	// Progress, when set, is called after each intent a run examines,
	// with how many it examined and how many it claimed (a CLI's progress
	// bar). Default: none.
	Progress func(examined, claimed int)
}

// ConfigError names a bad configuration field.
type ConfigError struct{ Field, Reason string }

func (e *ConfigError) Error() string { return "reconcile: " + e.Field + ": " + e.Reason }

// Validate checks c as New does, without a database: a nil error means
// New accepts it. Errors are *ConfigError naming the field (an invalid
// Spec, a negative duration or count, an unknown Redrive), so that a
// service can refuse a bad setting when it reads its configuration.
func (c *Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Instance == "" {
		host, _ := os.Hostname()
		out.Instance = host + "-" + strconv.Itoa(os.Getpid())
	}
	durations := []struct {
		field string
		d     *time.Duration
		def   time.Duration
	}{
		{"Grace", &out.Grace, 2 * time.Minute},
		{"ClaimTTL", &out.ClaimTTL, 5 * time.Minute},
		{"StuckAfter", &out.StuckAfter, 5 * time.Minute},
		{"VoidAfter", &out.VoidAfter, 30 * time.Minute},
		{"ActionGrace", &out.ActionGrace, 24 * time.Hour},
		{"VerifyWithin", &out.VerifyWithin, 24 * time.Hour},
		{"DriftWindow", &out.DriftWindow, 24 * time.Hour},
		{"DriftLag", &out.DriftLag, 4 * time.Hour},
		{"DriftEvery", &out.DriftEvery, time.Hour},
	}
	for _, f := range durations {
		if err := orDefault(f.d, f.def, f.field); err != nil {
			return out, err
		}
	}
	if len(out.Schedule) == 0 {
		out.Schedule = []time.Duration{time.Minute, 5 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour}
	}
	for i, d := range out.Schedule {
		if d <= 0 {
			return out, &ConfigError{fmt.Sprintf("Schedule[%d]", i), "must be positive"}
		}
	}
	counts := []struct {
		field string
		n     *int
		def   int
	}{
		{"MaxChecks", &out.MaxChecks, 6},
		{"VerifyBatch", &out.VerifyBatch, 50},
		{"Batch", &out.Batch, 100},
	}
	for _, f := range counts {
		if err := orDefault(f.n, f.def, f.field); err != nil {
			return out, err
		}
	}
	if out.Redrive != FailWithProof && out.Redrive != NewAttempt {
		return out, &ConfigError{"Redrive", fmt.Sprintf("unknown value %d (FailWithProof or NewAttempt)", out.Redrive)}
	}
	if out.Spec == "" {
		out.Spec = "@every 1m"
	}
	if err := schedule.Check(out.Spec); err != nil {
		return out, &ConfigError{"Spec", err.Error()}
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// orDefault sets *v to def when it is zero. A negative value is a
// *ConfigError naming field.
func orDefault[T int | time.Duration](v *T, def T, field string) error {
	switch {
	case *v < 0:
		return &ConfigError{field, "negative"}
	case *v == 0:
		*v = def
	}
	return nil
}
