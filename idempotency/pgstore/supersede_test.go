package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// supersede runs SupersedeTx in a transaction of its own.
func supersede(t *testing.T, b bundle, scope, key string, c idempotency.Completion) bool {
	t.Helper()
	var done bool
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		var err error
		done, err = b.store.SupersedeTx(context.Background(), tx, scope, key, c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return done
}

// claimK claims usr_A1_charge_<name>, fingerprinted by name, with a
// minute's lease and an hour's retention, and fails the test unless it
// was acquired.
func claimK(t *testing.T, b bundle, name string) (idempotency.ClaimParams, idempotency.Lease) {
	t.Helper()
	p := idempotency.ClaimParams{Scope: "usr_A1", Key: "usr_A1_charge_" + name, Fingerprint: mustFP(t, name),
		LockTimeout: time.Minute, Retention: time.Hour}
	cl, err := b.store.Claim(context.Background(), p)
	if err != nil || cl.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	return p, cl.Lease
}

func completion(status idempotency.Status, body string) idempotency.Completion {
	return idempotency.Completion{Status: status, Response: idempotency.Response{Code: 200, Body: []byte(body)}, Retention: time.Hour}
}

// A finished record answers what supersedes it from then on, sealed like
// any response when the store seals; its fingerprint still guards the key.
func TestSupersedeFinishedRecord(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]*pgstore.Config{"plain": nil, "sealed": {Keyring: encryptRing(t)}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupWith(t, cfg)
			p, lease := claimK(t, b, "k1")
			if err := b.store.Complete(ctx, lease, completion(idempotency.StatusFailed, "declined")); err != nil {
				t.Fatal(err)
			}
			if !supersede(t, b, p.Scope, p.Key, completion(idempotency.StatusCompleted, "charged")) {
				t.Fatal("a finished record was not superseded")
			}
			again, err := b.store.Claim(ctx, p)
			if err != nil || again.State != idempotency.ClaimReplay || again.Record.Status != idempotency.StatusCompleted ||
				string(again.Record.Response.Body) != "charged" || again.Record.LockVersion != lease.Version+1 {
				t.Fatalf("after the supersede: %+v %v, want the new answer under version %d", again, err, lease.Version+1)
			}
			other := p
			other.Fingerprint = mustFP(t, "k2")
			if m, err := b.store.Claim(ctx, other); err != nil || m.State != idempotency.ClaimMismatch {
				t.Fatalf("another fingerprint after the supersede: %+v %v, want a mismatch", m, err)
			}
		})
	}
}

// A holder whose record was superseded has lost its lease: its completion
// changes nothing, its transaction rolls back, and the key answers the
// superseding outcome.
func TestSupersedeFencesTheHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p, lease := claimK(t, b, "k2")
	if !supersede(t, b, p.Scope, p.Key, completion(idempotency.StatusCompleted, "charged")) {
		t.Fatal("a record in progress was not superseded")
	}
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return b.store.CompleteTx(ctx, tx, lease, completion(idempotency.StatusFailed, "declined"))
	})
	if !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the superseded holder's completion: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Heartbeat(ctx, lease, time.Minute); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the superseded holder's heartbeat: %v, want ErrLeaseLost", err)
	}
	rec, err := b.store.Get(ctx, p.Scope, p.Key)
	if err != nil || rec.Status != idempotency.StatusCompleted || string(rec.Response.Body) != "charged" {
		t.Fatalf("record: %+v %v", rec, err)
	}
}

// An expired record is never revived, and a missing one is not created.
func TestSupersedeLeavesExpiredAndMissingRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p, lease := claimK(t, b, "k3")
	if err := b.store.Complete(ctx, lease, completion(idempotency.StatusFailed, "declined")); err != nil {
		t.Fatal(err)
	}
	advance(b.pool)(t, 2*time.Hour)
	if supersede(t, b, p.Scope, p.Key, completion(idempotency.StatusCompleted, "charged")) {
		t.Fatal("an expired record was superseded")
	}
	if rec, err := b.store.Get(ctx, p.Scope, p.Key); err != nil || string(rec.Response.Body) != "declined" {
		t.Fatalf("the expired record changed: %+v %v", rec, err)
	}
	if supersede(t, b, p.Scope, "usr_A1_charge_none", completion(idempotency.StatusCompleted, "charged")) {
		t.Fatal("a missing record was superseded")
	}
	if _, err := b.store.Get(ctx, p.Scope, "usr_A1_charge_none"); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("a missing record was created: %v", err)
	}
	var ie *idempotency.InvalidError
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.store.SupersedeTx(ctx, tx, p.Scope, p.Key, idempotency.Completion{Status: idempotency.StatusProcessing, Retention: time.Hour})
		return err
	})
	if !errors.As(err, &ie) || ie.Field != "Completion.Status" {
		t.Fatalf("a completion that is no outcome: %v, want an InvalidError naming Completion.Status", err)
	}
}
