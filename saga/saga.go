package saga

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
)

// Definition is a named, ordered list of steps. Register it with
// [Orchestrator.Register] in every process that runs or recovers its
// sagas. A running saga keeps the steps it started with: a definition
// whose steps change (added, removed, renamed, reordered, another kind)
// must be registered under a new name, or its running sagas stop with
// ErrDefinitionChanged.
type Definition struct {
	// Name identifies the definition: 1 to 64 bytes of letters, digits
	// and . : - (no underscore).
	Name  string
	Steps []Step
}

// Kind says where a step's effects live.
type Kind int

const (
	// Local: the step's effects are writes in this database, made through
	// [Call.Tx]; they commit in one transaction with the step's
	// transition, or not at all.
	Local Kind = iota + 1
	// Remote: the step calls outside (a provider, another service). It
	// must be idempotent by [Call.Key]: a step whose outcome is unknown is
	// run again with the same key.
	Remote
)

func (k Kind) String() string {
	switch k {
	case Local:
		return "LOCAL"
	case Remote:
		return "REMOTE"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

func kindOf(s string) Kind {
	switch s {
	case "LOCAL":
		return Local
	case "REMOTE":
		return Remote
	}
	return 0
}

// ActionFunc is a step's work. Its output, encoded as JSON (a
// json.RawMessage or []byte is taken as JSON as it is; nil is null), is
// stored with the step and given to later steps and to the step's
// compensation. A nil error marks the step DONE. The error's class
// (Config.Classify) decides what follows: [Fail] (permanent) compensates
// the steps done so far; [Unknown] leaves the step UNKNOWN and the saga
// pending; any other error is transient and leaves the saga pending too.
// Either way a later run calls the action again with the same [Call.Key].
type ActionFunc func(ctx context.Context, c *Call) (any, error)

// CompensateFunc undoes a DONE step (a refund for a charge). It runs with
// the compensation's own key ([Call.Key] is "<key>_<step>_compensate") and
// is retried, with the same key, until it succeeds; an error made with
// [Fail] stops the saga in NEEDS_REVIEW instead. One made with [Wait]
// reschedules the saga (the step's effect cannot be decided yet: a charge
// still pending); [NothingToUndo] marks the step compensated with a note
// (the effect never happened: a charge declined after its step was done).
// A step that charged through payments is undone with [RefundCharge],
// which does all three.
type CompensateFunc func(ctx context.Context, c *Call) error

// Step is one step of a [Definition].
type Step struct {
	// Name identifies the step within its definition: 1 to 64 bytes of
	// letters, digits and . : - (no underscore, so that sub-keys split
	// back unambiguously).
	Name string
	// Kind is Local or Remote; it applies to Compensate too.
	Kind Kind
	// Action is required.
	Action ActionFunc
	// Compensate is optional: a DONE step without one keeps its effect
	// when the saga rolls back.
	Compensate CompensateFunc
}

// Call is what a step's action or compensation gets.
type Call struct {
	// Saga is the definition's name.
	Saga string
	// Scope and SagaKey are the saga's (RunParams.Scope, RunParams.Key).
	Scope, SagaKey string
	// Step is the step's name.
	Step string
	// Key is this call's sub-key: "<SagaKey>_<Step>" for the action,
	// "<SagaKey>_<Step>_compensate" for the compensation. Derive every
	// reference from it (a payment's idempotency key, a row's unique key):
	// it is the same on every attempt.
	Key string
	// Attempt counts this call's attempts from 1, for logs only: never
	// derive a reference from it.
	Attempt int
	// Tx is the transaction of a Local step's transition: its writes
	// commit with it. Nil for Remote steps.
	Tx pgx.Tx
	// Input is the saga's input, as stored.
	Input json.RawMessage
	// Outputs holds the output of every step done so far, by name (for a
	// compensation, its own step's too).
	Outputs map[string]json.RawMessage

	// done is when each step done so far was recorded DONE (the
	// database's clock), read when the saga was read.
	done map[string]time.Time
	read readClock
}

// DecodeInput decodes the saga's input into v.
func (c *Call) DecodeInput(v any) error { return json.Unmarshal(c.Input, v) }

// DecodeOutput decodes the output of the done step named step into v. It
// returns ErrNotFound when that step has no output.
func (c *Call) DecodeOutput(step string, v any) error {
	raw, ok := c.Outputs[step]
	if !ok {
		return fmt.Errorf("%w: no output of step %q", ErrNotFound, step)
	}
	return json.Unmarshal(raw, v)
}

// DoneAgo reports how long ago the action of the step named step was
// recorded DONE, by the database's clock (read with the saga, plus the
// time since on this process's monotonic clock), and false when that step
// is not done (nor being compensated or compensated). A compensation
// bounds a wait with it ([Wait]): "the charge has been pending for".
func (c *Call) DoneAgo(step string) (time.Duration, bool) {
	at, ok := c.done[step]
	if !ok || at.IsZero() || c.read.db.IsZero() {
		return 0, false
	}
	return c.read.db.Sub(at) + time.Since(c.read.local), true
}

// SubKey returns the sub-key of a step's action: "<key>_<step>".
func SubKey(key, step string) string { return key + "_" + step }

// CompensationKey returns the sub-key of a step's compensation:
// "<key>_<step>_compensate".
func CompensationKey(key, step string) string { return key + "_" + step + "_compensate" }

// Status is a saga's state.
type Status string

const (
	// StatusRunning: steps are being run (or wait for a retry: a step's
	// outcome is unknown or it failed transiently).
	StatusRunning Status = "RUNNING"
	// StatusCompensating: a step failed permanently; the steps done
	// before it are being compensated in reverse order.
	StatusCompensating Status = "COMPENSATING"
	// StatusCompleted: every step is done. Final.
	StatusCompleted Status = "COMPLETED"
	// StatusRolledBack: a step failed permanently and every step done
	// before it was compensated. Final.
	StatusRolledBack Status = "ROLLED_BACK"
	// StatusNeedsReview: a compensation failed permanently (a refund
	// refused, a charge that did not settle within its bound); a human
	// decides. Final: payonce does not touch the saga again.
	StatusNeedsReview Status = "NEEDS_REVIEW"
)

// Final reports whether s is an outcome (COMPLETED, ROLLED_BACK or
// NEEDS_REVIEW).
func (s Status) Final() bool {
	return s == StatusCompleted || s == StatusRolledBack || s == StatusNeedsReview
}

// StepStatus is a step's state.
type StepStatus string

const (
	StepPending StepStatus = "PENDING"
	// StepRunning: a Remote step's call was started and its outcome not
	// recorded (a crash during the call): it runs again with its key.
	StepRunning StepStatus = "RUNNING"
	// StepUnknown: the last call's outcome is unknown; never compensated
	// blindly, never run with another key: it runs again with its key.
	StepUnknown StepStatus = "UNKNOWN"
	StepDone    StepStatus = "DONE"
	// StepFailed: the step failed permanently (it left no effect).
	StepFailed StepStatus = "FAILED"
	// StepCompensating: the step's compensation was started and has not
	// succeeded yet.
	StepCompensating StepStatus = "COMPENSATING"
	// StepCompensated: the step's compensation succeeded, or found nothing
	// to undo ([NothingToUndo]: the step's note says why).
	StepCompensated StepStatus = "COMPENSATED"
	// StepNeedsReview: the step's compensation failed permanently.
	StepNeedsReview StepStatus = "NEEDS_REVIEW"
)

// RunParams are the inputs of [Orchestrator.Run].
type RunParams struct {
	// Saga is the name of a registered [Definition].
	Saga string
	// Scope is the authenticated user, account or tenant.
	Scope string
	// Key is the client's key of this saga (a UUID, or derived with
	// idempotency.DeriveIntent): letters, digits and . _ : -. The saga's
	// idempotency record is "{Scope}_saga_{Key}" and its steps' sub-keys
	// "<Key>_<step>"; all of them must fit 255 bytes. One key names one
	// saga per scope, whatever its definition.
	Key string
	// Input is the saga's input, encoded as JSON (a []byte or
	// json.RawMessage is taken as JSON as it is). It is stored with the
	// saga and given to every step.
	Input any
	// Fingerprint, when set, is what the key is bound to (see
	// idempotency.NewFingerprint): the request's significant fields.
	// Default: the whole input, canonically encoded. Either way the
	// definition's name is bound too.
	Fingerprint idempotency.Fingerprint
}

// Result is a finished saga's answer, stored in its idempotency record
// and replayed byte for byte to every retry of its key.
type Result struct {
	Saga   string `json:"saga"`
	Status Status `json:"status"`
	// Output is the last step's output (COMPLETED).
	Output json.RawMessage `json:"output,omitempty"`
	// FailedStep is the step whose permanent failure rolled the saga
	// back, Reason its error (ROLLED_BACK); for NEEDS_REVIEW, Reason says
	// which compensation failed and why.
	FailedStep string       `json:"failed_step,omitempty"`
	Reason     string       `json:"reason,omitempty"`
	Steps      []StepResult `json:"steps"`
	// Body is the stored answer itself (the JSON of the fields above),
	// identical on the first run and on every replay.
	Body []byte `json:"-"`
	// Replayed is true when the answer was stored by an earlier call.
	Replayed bool `json:"-"`
}

// StepResult is one step's part of a [Result].
type StepResult struct {
	Name   string          `json:"name"`
	Status StepStatus      `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Note says why a COMPENSATED step had nothing to undo
	// ([NothingToUndo]).
	Note string `json:"note,omitempty"`
}

// Saga is the stored state of one saga, as [Orchestrator.State] reads it.
type Saga struct {
	Scope, Key string
	// Name is the definition's name.
	Name   string
	Status Status
	// CurrentStep is the position of the step last run or compensated.
	CurrentStep int
	Input       json.RawMessage
	// FailedStep and Reason: see [Result].
	FailedStep, Reason   string
	Steps                []StepState
	CreatedAt, UpdatedAt time.Time
	// FinishedAt is zero until the saga is final.
	FinishedAt time.Time
	// WakeAt is set while the saga waits ([Wait]): recovery leaves it
	// until then.
	WakeAt time.Time

	fingerprint string
}

// readClock is when a saga was read: the database's clock, and this
// process's (monotonic) at the same moment.
type readClock struct{ db, local time.Time }

// StepState is the stored state of one step.
type StepState struct {
	Position int
	Name     string
	Kind     Kind
	Status   StepStatus
	// Output is set once the step is DONE.
	Output json.RawMessage
	// Error is the last attempt's error (empty after a success).
	Error string
	// Note says why a COMPENSATED step had nothing to undo
	// ([NothingToUndo]).
	Note                           string
	Attempts, CompensationAttempts int
	StartedAt, FinishedAt          time.Time
	CompensatedAt, UpdatedAt       time.Time
}

// result is s's answer.
func (s *Saga) result() Result {
	r := Result{Saga: s.Name, Status: s.Status, FailedStep: s.FailedStep, Reason: s.Reason,
		Steps: make([]StepResult, len(s.Steps))}
	for i, st := range s.Steps {
		r.Steps[i] = StepResult{Name: st.Name, Status: st.Status, Output: st.Output, Error: st.Error, Note: st.Note}
	}
	if s.Status == StatusCompleted && len(s.Steps) > 0 {
		r.Output = s.Steps[len(s.Steps)-1].Output
	}
	return r
}
