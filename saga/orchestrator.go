package saga

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/internal/schedule"
)

// Config configures an [Orchestrator]. The zero value (or nil) means
// defaults.
type Config struct {
	// Store is the idempotency store of the sagas' keys; it must be on the
	// orchestrator's database (a saga's final transition completes its
	// record in the same transaction). Default: pgstore.New over pool,
	// with MeterProvider.
	Store idempotency.TxStore[pgx.Tx]
	// LockTimeout is the lease of a saga being driven, kept alive by
	// heartbeats while its steps run. A crashed driver's saga is resumed
	// (by a retry or Recover) once it ends. Default 30s.
	LockTimeout time.Duration
	// Retention is how long a finished saga's answer is replayed from its
	// idempotency record; afterwards a retry gets the same answer rebuilt
	// from the saga's rows. Default 24h; must exceed LockTimeout.
	Retention time.Duration
	// FinishTimeout bounds recording a step's outcome after its action
	// returned, which runs even when the caller's context was cancelled:
	// the step may have had its effect. Default 10s.
	FinishTimeout time.Duration
	// CompensationAttempts is how many times one run tries a compensation
	// that fails transiently (or with an unknown outcome) before it stops
	// and answers ErrPending; a retry or Recover goes on. Default 3.
	CompensationAttempts int
	// CompensationBackoff is the wait before a compensation's second
	// attempt in one run, doubled for each next one. Default 100ms.
	CompensationBackoff time.Duration
	// Classify says what a step's error means (see [Class]). Default
	// [DefaultClassify].
	Classify func(error) Class
	// StuckAfter: Recover also takes sagas without progress for this long
	// (not only those whose lease ended). Default 5m.
	StuckAfter time.Duration
	// RecoverBatch is how many sagas one Recover examines at most.
	// Default 100.
	RecoverBatch int
	// RecoverSpec is the cron schedule of [Orchestrator.Start] (five
	// fields, six with seconds, or a descriptor). Default "@every 1m".
	RecoverSpec string
	// Logger receives warnings; keys appear only as short hashes.
	// Default: discarded.
	Logger *slog.Logger
	// MeterProvider receives the saga instruments ([MetricStepsExecuted],
	// [MetricCompensations], [MetricStuck]) and the idempotency core's.
	// Default: a no-op provider.
	MeterProvider metric.MeterProvider
	// TracerProvider receives the idempotency core's spans: an
	// idempotency.Do span around each run of a saga (Run, Recover), with
	// the claim, the run and the completion inside it (keys as short hashes
	// only). Default: no spans.
	TracerProvider trace.TracerProvider
	// Hooks are called at each step's commit points; nil: none. For tests
	// that crash a process where a real one can die (see Hooks).
	Hooks *Hooks
}

// Hooks observe the two instants around each step's commit, where a
// process that dies leaves the most to recover: BeforeCommit runs when the
// step's outcome (done, failed, or unknown) is decided and not yet
// committed, AfterCommit once it is committed and nothing else has run.
// Each gets the step's key (SubKey of the saga's key and the step's name,
// with a compensation's suffix). A hook must not block; it runs on the
// saga's goroutine. Their use is fault injection: a test that kills the
// process in a hook proves that recovery finishes the saga from exactly
// that point (examples/checkout does, PAYONCE_CHECKOUT_CRASH_AT).
type Hooks struct {
	BeforeCommit func(key string)
	AfterCommit  func(key string)
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{{&out.LockTimeout, 30 * time.Second, "LockTimeout"}, {&out.Retention, 24 * time.Hour, "Retention"},
		{&out.FinishTimeout, 10 * time.Second, "FinishTimeout"}, {&out.CompensationBackoff, 100 * time.Millisecond, "CompensationBackoff"},
		{&out.StuckAfter, 5 * time.Minute, "StuckAfter"}} {
		if *f.d < 0 {
			return out, &ConfigError{"Config." + f.name, fmt.Sprintf("must be positive, got %s", *f.d)}
		}
		if *f.d == 0 {
			*f.d = f.v
		}
	}
	if out.Retention <= out.LockTimeout {
		return out, &ConfigError{"Config.Retention", fmt.Sprintf("must exceed LockTimeout (%s), got %s", out.LockTimeout, out.Retention)}
	}
	for _, f := range []struct {
		n    *int
		v    int
		name string
	}{{&out.CompensationAttempts, 3, "CompensationAttempts"}, {&out.RecoverBatch, 100, "RecoverBatch"}} {
		if *f.n < 0 {
			return out, &ConfigError{"Config." + f.name, fmt.Sprintf("must be positive, got %d", *f.n)}
		}
		if *f.n == 0 {
			*f.n = f.v
		}
	}
	if out.RecoverSpec == "" {
		out.RecoverSpec = "@every 1m"
	}
	if err := schedule.Check(out.RecoverSpec); err != nil {
		return out, &ConfigError{"Config.RecoverSpec", err.Error()}
	}
	if out.Classify == nil {
		out.Classify = DefaultClassify
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, nil
}

// Orchestrator runs sagas: each once per (scope, key), resumed where it
// stopped by retries and by [Orchestrator.Recover]. Create one with [New];
// it is safe for concurrent use.
type Orchestrator struct {
	pool    *pgxpool.Pool
	store   idempotency.TxStore[pgx.Tx]
	exec    *idempotency.TxExecutor[pgx.Tx]
	cfg     Config
	metrics *instruments
	// recoverPage is how many open sagas Recover reads at a time.
	recoverPage int

	mu   sync.RWMutex
	defs map[string]*Definition
}

// New returns an Orchestrator on pool's database, which must be migrated
// (package migrations). A nil cfg means defaults. It returns a
// *ConfigError naming a bad field.
func New(pool *pgxpool.Pool, cfg *Config) (*Orchestrator, error) {
	if pool == nil {
		return nil, &ConfigError{"pool", "nil"}
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if c.Store == nil {
		if c.Store, err = pgstore.New(pool, &pgstore.Config{MeterProvider: c.MeterProvider}); err != nil {
			return nil, err
		}
	}
	exec, err := idempotency.NewTx(c.Store, &idempotency.Config{LockTimeout: c.LockTimeout, Retention: c.Retention,
		FinishTimeout: c.FinishTimeout, Logger: c.Logger, MeterProvider: c.MeterProvider, TracerProvider: c.TracerProvider})
	if err != nil {
		return nil, err
	}
	ins, err := newInstruments(c.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("saga: metrics: %w", err)
	}
	return &Orchestrator{pool: pool, store: c.Store, exec: exec, cfg: c, metrics: ins, recoverPage: 100,
		defs: map[string]*Definition{}}, nil
}

// Register makes def runnable by [Orchestrator.Run] and recoverable by
// [Orchestrator.Recover]. It returns a *ConfigError naming a bad field of
// def, or a name already registered.
func (o *Orchestrator) Register(def Definition) error {
	if err := def.validate(); err != nil {
		return err
	}
	def.Steps = append([]Step(nil), def.Steps...)
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, dup := o.defs[def.Name]; dup {
		return &ConfigError{"Definition.Name", fmt.Sprintf("%q is already registered", def.Name)}
	}
	o.defs[def.Name] = &def
	return nil
}

func (d *Definition) validate() error {
	if err := idempotency.ValidateAction(d.Name); err != nil {
		return &ConfigError{"Definition.Name", reasonOf(err)}
	}
	if len(d.Steps) == 0 {
		return &ConfigError{"Definition.Steps", "at least one step is required"}
	}
	seen := map[string]bool{}
	for i, s := range d.Steps {
		field := fmt.Sprintf("Definition.Steps[%d]", i)
		switch err := idempotency.ValidateAction(s.Name); {
		case err != nil:
			return &ConfigError{field + ".Name", reasonOf(err)}
		case seen[s.Name]:
			return &ConfigError{field + ".Name", fmt.Sprintf("%q appears twice", s.Name)}
		case s.Kind != Local && s.Kind != Remote:
			return &ConfigError{field + ".Kind", fmt.Sprintf("must be Local or Remote, got %d", int(s.Kind))}
		case s.Action == nil:
			return &ConfigError{field + ".Action", "nil"}
		}
		seen[s.Name] = true
	}
	return nil
}

func reasonOf(err error) string {
	var inv *idempotency.InvalidError
	if errors.As(err, &inv) {
		return inv.Reason
	}
	return err.Error()
}

func (o *Orchestrator) definition(name string) *Definition {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.defs[name]
}

// ref names one saga: its scope, its client key, and its idempotency
// record's key.
type ref struct{ scope, key, record string }

// refOf validates scope and key: the record's key and every sub-key of
// def must be valid idempotency keys.
func refOf(scope, key string, def *Definition) (ref, error) {
	record, err := idempotency.ComposeKey(scope, "saga", key)
	if err != nil {
		field := "RunParams.Key"
		var inv *idempotency.InvalidError
		if errors.As(err, &inv) && inv.Field == "scope" {
			field = "RunParams.Scope"
		}
		return ref{}, &idempotency.InvalidError{Field: field, Reason: reasonOf(err)}
	}
	for _, s := range def.Steps {
		if err := idempotency.ValidateKey(CompensationKey(key, s.Name)); err != nil {
			return ref{}, &idempotency.InvalidError{Field: "RunParams.Key",
				Reason: fmt.Sprintf("the sub-key of step %q is not a valid key: %s", s.Name, reasonOf(err))}
		}
	}
	return ref{scope: scope, key: key, record: record}, nil
}

// Run runs the saga p.Saga once for (p.Scope, p.Key): it claims the key,
// records the saga, and runs its steps in order, each step's transition
// committed with its local effects; a permanent failure compensates the
// steps done, in reverse order. A retry with the same key resumes from
// the first step not done (never re-running a done one), or replays the
// finished saga's answer byte for byte.
//
// Errors:
//   - *idempotency.InvalidError (idempotency.ErrInvalid): bad params (an
//     unregistered saga, a bad key, input that is not JSON); nothing was
//     recorded;
//   - *RolledBackError (ErrRolledBack), with the Result: a step failed
//     permanently and the saga was rolled back;
//   - *NeedsReviewError (ErrNeedsReview), with the Result: a compensation
//     failed permanently;
//   - *PendingError (ErrPending): the saga stopped before its outcome (a
//     step's outcome unknown, a transient failure); retry with the same
//     key;
//   - *idempotency.InProgressError (idempotency.ErrInProgress): another
//     call (or Recover) is driving this saga;
//   - idempotency.ErrFingerprintMismatch: the key was used with another
//     input or definition; nothing was changed;
//   - ErrDefinitionChanged: the saga started with other steps;
//   - idempotency.ErrLeaseLost, or a database error: the run stopped; a
//     retry resumes.
func (o *Orchestrator) Run(ctx context.Context, p RunParams) (Result, error) {
	def := o.definition(p.Saga)
	if def == nil {
		return Result{}, &idempotency.InvalidError{Field: "RunParams.Saga", Reason: fmt.Sprintf("%q is not registered", p.Saga)}
	}
	r, err := refOf(p.Scope, p.Key, def)
	if err != nil {
		return Result{}, err
	}
	input, err := canonicalInput(p.Input)
	if err != nil {
		return Result{}, err
	}
	fb := idempotency.NewFingerprint().String("saga", def.Name)
	if p.Fingerprint != "" {
		if err := p.Fingerprint.Validate(); err != nil {
			return Result{}, &idempotency.InvalidError{Field: "RunParams.Fingerprint", Reason: reasonOf(err)}
		}
		fb.String("fingerprint", string(p.Fingerprint))
	} else {
		fb.Bytes("input", input)
	}
	fp, err := fb.Sum()
	if err != nil {
		return Result{}, err
	}
	return o.run(ctx, def, r, fp, input)
}

// canonicalInput encodes the input as compact JSON with object keys in
// order, so that neither field order nor whitespace changes the
// fingerprint.
func canonicalInput(in any) ([]byte, error) {
	raw, err := encodeJSON(in)
	if err != nil {
		return nil, &idempotency.InvalidError{Field: "RunParams.Input", Reason: err.Error()}
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, &idempotency.InvalidError{Field: "RunParams.Input", Reason: err.Error()}
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, &idempotency.InvalidError{Field: "RunParams.Input", Reason: err.Error()}
	}
	return out, nil
}

// encodeJSON encodes v, taking a []byte or json.RawMessage as JSON as it
// is.
func encodeJSON(v any) ([]byte, error) {
	switch b := v.(type) {
	case nil:
		return []byte("null"), nil
	case json.RawMessage:
		return checkJSON(b)
	case []byte:
		return checkJSON(b)
	}
	return json.Marshal(v)
}

func checkJSON(b []byte) ([]byte, error) {
	if !json.Valid(b) {
		return nil, errors.New("not valid JSON")
	}
	return append([]byte(nil), b...), nil
}

// run drives the saga under its key's lease, or answers as the key's
// record says. input is nil for Recover: the saga must exist.
func (o *Orchestrator) run(ctx context.Context, def *Definition, r ref, fp idempotency.Fingerprint, input []byte) (Result, error) {
	req := idempotency.Request{Scope: r.scope, Key: r.record, Fingerprint: fp}
	res, err := o.exec.DoRecording(ctx, req, func(ctx context.Context, lease idempotency.Lease) (idempotency.Recording, error) {
		return o.drive(ctx, lease, def, r, fp, input)
	})
	var failed *idempotency.FailedError
	switch {
	case err == nil:
		return answer(res.Response.Body, res.Replayed)
	case errors.As(err, &failed):
		out, err := answer(failed.Response.Body, failed.Replayed)
		if err != nil {
			return out, err
		}
		if out.Status == StatusNeedsReview {
			return out, &NeedsReviewError{Step: out.FailedStep, Reason: out.Reason}
		}
		return out, &RolledBackError{Step: out.FailedStep, Reason: out.Reason}
	}
	return Result{}, err
}

// answer decodes a stored answer: the first run's result is decoded from
// the very bytes it stored, so that it equals every replay.
func answer(body []byte, replayed bool) (Result, error) {
	var r Result
	if err := json.Unmarshal(body, &r); err != nil {
		return Result{}, fmt.Errorf("saga: stored answer unreadable: %w", err)
	}
	r.Body, r.Replayed = body, replayed
	return r, nil
}

// State reads the saga of (scope, key) and its steps. Errors: ErrNotFound,
// or a database error.
func (o *Orchestrator) State(ctx context.Context, scope, key string) (Saga, error) {
	s, _, err := load(ctx, o.pool, scope, key)
	if err != nil {
		return Saga{}, err
	}
	return *s, nil
}

// Start runs Recover on Config.RecoverSpec until ctx ends or stop is
// called; runs never overlap within one Orchestrator. Several processes
// may recover at once: a saga is driven by one of them (or by a client's
// retry) at a time.
func (o *Orchestrator) Start(ctx context.Context) (stop func()) {
	return schedule.Start(ctx, o.cfg.RecoverSpec, o.cfg.Logger, "saga: recovery failed", func(ctx context.Context) error {
		_, err := o.Recover(ctx)
		return err
	})
}
