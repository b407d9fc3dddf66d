package saga_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/saga"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := saga.New(nil, nil); !isConfigError(err, "pool") {
		t.Fatalf("nil pool: %v", err)
	}
	for field, cfg := range map[string]*saga.Config{
		"Config.LockTimeout":          {LockTimeout: -time.Second},
		"Config.Retention":            {LockTimeout: time.Hour, Retention: time.Minute},
		"Config.CompensationAttempts": {CompensationAttempts: -1},
		"Config.RecoverBatch":         {RecoverBatch: -1},
		"Config.StuckAfter":           {StuckAfter: -time.Second},
		"Config.RecoverSpec":          {RecoverSpec: "every so often"},
	} {
		if _, err := saga.New(pool, cfg); !isConfigError(err, field) {
			t.Fatalf("%s: %v", field, err)
		}
	}
	o, err := saga.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	act := func(context.Context, *saga.Call) (any, error) { return nil, nil }
	good := saga.Step{Name: "a", Kind: saga.Local, Action: act}
	for _, tc := range []struct {
		field string
		def   saga.Definition
	}{
		{"Definition.Name", saga.Definition{Name: "bad_name", Steps: []saga.Step{good}}},
		{"Definition.Steps", saga.Definition{Name: "empty"}},
		{"Definition.Steps[1].Name", saga.Definition{Name: "x", Steps: []saga.Step{good, {Name: "b_c", Kind: saga.Local, Action: act}}}},
		{"Definition.Steps[1].Name", saga.Definition{Name: "x", Steps: []saga.Step{good, good}}},
		{"Definition.Steps[0].Name", saga.Definition{Name: "x", Steps: []saga.Step{{Kind: saga.Local, Action: act}}}},
		{"Definition.Steps[1].Kind", saga.Definition{Name: "x", Steps: []saga.Step{good, {Name: "b", Action: act}}}},
		{"Definition.Steps[0].Action", saga.Definition{Name: "x", Steps: []saga.Step{{Name: "a", Kind: saga.Remote}}}},
	} {
		if err := o.Register(tc.def); !isConfigError(err, tc.field) {
			t.Fatalf("%s: %v", tc.field, err)
		}
	}
	if err := o.Register(saga.Definition{Name: "ok", Steps: []saga.Step{good}}); err != nil {
		t.Fatal(err)
	}
	if err := o.Register(saga.Definition{Name: "ok", Steps: []saga.Step{good}}); !isConfigError(err, "Definition.Name") {
		t.Fatalf("registered twice: %v", err)
	}
}

func isConfigError(err error, field string) bool {
	var ce *saga.ConfigError
	return errors.As(err, &ce) && ce.Field == field && errors.Is(err, idempotency.ErrInvalid)
}

// Bad parameters are refused, naming the field, and record nothing.
func TestRunRefusesBadParams(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		field string
		p     saga.RunParams
	}{
		{"RunParams.Saga", saga.RunParams{Saga: "nope", Scope: scope, Key: "k1", Input: 1}},
		{"RunParams.Input", saga.RunParams{Saga: "checkout", Scope: scope, Key: "k1", Input: []byte("{not json")}},
		{"RunParams.Key", saga.RunParams{Saga: "checkout", Scope: scope, Key: "k1" + strings.Repeat("x", 236), Input: 1}},
		{"RunParams.Key", saga.RunParams{Saga: "checkout", Scope: scope, Key: "k 1", Input: 1}},
		{"RunParams.Scope", saga.RunParams{Saga: "checkout", Key: "k1", Input: 1}},
		{"RunParams.Fingerprint", saga.RunParams{Saga: "checkout", Scope: scope, Key: "k1", Input: 1, Fingerprint: "abc"}},
	} {
		_, err := b.orch.Run(ctx, tc.p)
		var inv *idempotency.InvalidError
		if !errors.As(err, &inv) || inv.Field != tc.field || !errors.Is(err, idempotency.ErrInvalid) {
			t.Fatalf("%s: %v", tc.field, err)
		}
	}
	for _, key := range []string{"k1", "k 1"} {
		if _, err := b.orch.State(ctx, scope, key); !errors.Is(err, saga.ErrNotFound) || !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("state of %q: %v, want not found", key, err)
		}
	}
	if got := b.effects(t); got != (effects{}) {
		t.Fatalf("effects %+v", got)
	}
}

func TestDefaultClassify(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	for _, tc := range []struct {
		err  error
		want saga.Class
	}{
		{base, saga.ClassTransient},
		{saga.Fail(base), saga.ClassPermanent},
		{saga.Unknown(base), saga.ClassUnknown},
		{context.DeadlineExceeded, saga.ClassUnknown},
		{&idempotency.InProgressError{}, saga.ClassUnknown},
		{saga.Fail(saga.Unknown(base)), saga.ClassPermanent},
		{&provider.DeclineError{Provider: "stripe"}, saga.ClassPermanent},
		{&provider.InvalidRequestError{Provider: "stripe"}, saga.ClassPermanent},
		{&provider.UnknownOutcomeError{Provider: "stripe", Err: base}, saga.ClassUnknown},
		{&payments.UnderReviewError{Reason: "no proof"}, saga.ClassUnknown},
		{saga.Wait(base, time.Minute), saga.ClassWaiting},
		{fmt.Errorf("refund: %w", saga.Wait(&provider.UnknownOutcomeError{Provider: "stripe", Err: base}, 0)), saga.ClassWaiting},
		{saga.Fail(saga.Wait(base, time.Minute)), saga.ClassPermanent},
	} {
		if got := saga.DefaultClassify(tc.err); got != tc.want {
			t.Fatalf("%v: %s, want %s", tc.err, got, tc.want)
		}
	}
}
