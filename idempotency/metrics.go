package idempotency

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Instrument names, exactly as dashboards and alert rules know them (the
// OpenTelemetry Prometheus exporter turns the dots into underscores and
// adds _total to counters). The histograms in milliseconds carry the unit
// in their name and declare no unit, so that the exporter does not append
// a second one (_ms_milliseconds).
const (
	MetricDuplicatesBlocked     = "idempotency.duplicates_blocked"
	MetricLockTimeouts          = "idempotency.lock_timeouts"
	MetricFingerprintMismatches = "idempotency.fingerprint_mismatches"
	MetricStoreSize             = "idempotency.store_size"
	MetricProcessingDuration    = "idempotency.processing_duration_ms"
	MetricKeysCreatedPerUser    = "idempotency.keys_created_per_user"
	MetricOrphanReclaims        = "idempotency.orphan_reclaims"
	MetricRateLimited           = "idempotency.rate_limited"
	// MetricReplayCacheHits counts replays answered from an executor's
	// replay cache (also counted in idempotency.duplicates_blocked).
	MetricReplayCacheHits = "idempotency.replay_cache_hits"
)

// ScopeBuckets bounds the cardinality of the scope attribute of
// idempotency.keys_created_per_user: scopes are hashed into this many
// buckets, so no user id ever becomes a label, while one abusive scope
// still shows as one hot bucket (its members are found with the store).
const ScopeBuckets = 64

// Sizer is implemented by stores that can estimate how many records they
// hold cheaply (no full scan): it feeds idempotency.store_size.
type Sizer interface {
	ApproxSize(ctx context.Context) (int64, error)
}

// Metrics records the idempotency instruments. Get an executor's with
// [Executor.Metrics]; other executors over the same store (pgstore's
// one-transaction mode, the HTTP middleware) record through it too.
type Metrics struct {
	duplicates, lockTimeouts, mismatches, keysCreated, reclaims, cacheHits metric.Int64Counter
	duration                                                               metric.Float64Histogram
	// off: no MeterProvider, so the hot path's recordings (Claim,
	// Action, cachedReplay) skip building their options.
	off bool
}

func newMetrics(mp metric.MeterProvider, store Store) (*Metrics, error) {
	var (
		out Metrics
		err error
	)
	if mp == nil {
		mp = noop.NewMeterProvider()
		out.off = true
	}
	m := mp.Meter("github.com/payonce/payonce/idempotency")
	counter := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = m.Int64Counter(name, metric.WithDescription(desc))
		return c
	}
	out.duplicates = counter(MetricDuplicatesBlocked, "Requests answered from a stored outcome (reason=replay) or refused while the first is still processing (reason=in_progress): executions that did not happen twice.")
	out.lockTimeouts = counter(MetricLockTimeouts, "Leases that ran out under a running action (its holder learned it had lost the key): actions longer than the lock timeout, or stalled processes.")
	out.mismatches = counter(MetricFingerprintMismatches, "Requests refused because their key was used before with other significant fields.")
	out.keysCreated = counter(MetricKeysCreatedPerUser, "New keys claimed, by scope bucket (scope_bucket is a hash of the scope modulo 64).")
	out.reclaims = counter(MetricOrphanReclaims, "Orphaned records (holder crashed or released its lease) taken over by a new holder.")
	out.cacheHits = counter(MetricReplayCacheHits, "Replays (and fingerprint mismatches) answered from the executor's in-process replay cache, without a round trip.")
	if err != nil {
		return nil, err
	}
	out.duration, err = m.Float64Histogram(MetricProcessingDuration,
		metric.WithDescription("How long protected actions ran, by outcome (completed, failed, transient)."),
		metric.WithExplicitBucketBoundaries(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000))
	if err != nil {
		return nil, err
	}
	if sizer, ok := store.(Sizer); ok {
		_, err = m.Int64ObservableGauge(MetricStoreSize,
			metric.WithDescription("Records in the store (an estimate that costs no table scan)."),
			metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
				n, err := sizer.ApproxSize(ctx)
				if err != nil {
					return err
				}
				o.Observe(n)
				return nil
			}))
		if err != nil {
			return nil, err
		}
	}
	return &out, nil
}

var (
	attrReplay     = metric.WithAttributes(attribute.String("reason", "replay"))
	attrInProgress = metric.WithAttributes(attribute.String("reason", "in_progress"))
)

// Claim records what a claim found.
func (m *Metrics) Claim(ctx context.Context, scope string, s ClaimState) {
	if m.off {
		return
	}
	switch s {
	case ClaimAcquired:
		m.keysCreated.Add(ctx, 1, bucketAttrs[scopeBucket(scope)])
	case ClaimReclaimed:
		m.reclaims.Add(ctx, 1)
	case ClaimReplay:
		m.duplicates.Add(ctx, 1, attrReplay)
	case ClaimInProgress:
		m.duplicates.Add(ctx, 1, attrInProgress)
	case ClaimMismatch:
		m.mismatches.Add(ctx, 1)
	}
}

// cachedReplay records an answer from the replay cache.
func (m *Metrics) cachedReplay(ctx context.Context) {
	if !m.off {
		m.cacheHits.Add(ctx, 1)
	}
}

// Action records how long an action ran and how it ended: "completed",
// "failed" (permanent) or "transient".
func (m *Metrics) Action(ctx context.Context, d time.Duration, outcome string) {
	if m.off {
		return
	}
	opt, ok := outcomeAttrs[outcome]
	if !ok {
		opt = metric.WithAttributes(attribute.String("outcome", outcome))
	}
	m.duration.Record(ctx, float64(d)/float64(time.Millisecond), opt)
}

// The attribute sets of the hot path, built once.
var (
	bucketAttrs = func() (out [ScopeBuckets]metric.MeasurementOption) {
		for i := range out {
			out[i] = metric.WithAttributes(attribute.String("scope_bucket", strconv.Itoa(i)))
		}
		return out
	}()
	outcomeAttrs = map[string]metric.MeasurementOption{}
)

func init() {
	for _, o := range []string{"completed", "failed", "transient"} {
		outcomeAttrs[o] = metric.WithAttributes(attribute.String("outcome", o))
	}
}

// LeaseLost records a holder that learned its lease had run out and been
// taken over.
func (m *Metrics) LeaseLost(ctx context.Context) { m.lockTimeouts.Add(ctx, 1) }

// ScopeBucket is the bounded label of a scope in
// idempotency.keys_created_per_user.
func ScopeBucket(scope string) string { return strconv.Itoa(scopeBucket(scope)) }

// scopeBucket is FNV-1a (32 bits) of scope modulo ScopeBuckets, without
// allocating.
func scopeBucket(scope string) int {
	h := uint32(2166136261)
	for i := 0; i < len(scope); i++ {
		h ^= uint32(scope[i])
		h *= 16777619
	}
	return int(h % ScopeBuckets)
}
