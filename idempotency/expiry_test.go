package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// Config.RefusalHorizon: 30 days by default under ExpiredRefused, carried
// into every claim; refused when negative, and under ExpiredIsNew, where
// nothing would ever be kept for it.
func TestRefusalHorizonConfig(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	for name, tc := range map[string]struct {
		cfg  idempotency.Config
		want time.Duration
	}{
		"ExpiredIsNew":           {idempotency.Config{}, 0},
		"ExpiredRefused default": {idempotency.Config{Expired: idempotency.ExpiredRefused}, 30 * 24 * time.Hour},
		"ExpiredRefused set":     {idempotency.Config{Expired: idempotency.ExpiredRefused, RefusalHorizon: time.Hour}, time.Hour},
	} {
		exec, err := idempotency.New(store, &tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := exec.Config().RefusalHorizon; got != tc.want {
			t.Fatalf("%s: RefusalHorizon = %s, want %s", name, got, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		cfg  idempotency.Config
		says string
	}{
		"negative":         {idempotency.Config{Expired: idempotency.ExpiredRefused, RefusalHorizon: -time.Hour}, "must be positive"},
		"under ExpiredNew": {idempotency.Config{RefusalHorizon: time.Hour}, "set Config.Expired to ExpiredRefused"},
	} {
		_, err := idempotency.New(store, &tc.cfg)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != "Config.RefusalHorizon" || !strings.Contains(err.Error(), tc.says) {
			t.Fatalf("%s: err = %v, want an InvalidError naming Config.RefusalHorizon that says %q", name, err, tc.says)
		}
	}
}

// The executor hands its horizon to the store with every claim.
func TestRefusalHorizonReachesTheStore(t *testing.T) {
	t.Parallel()
	var seen []idempotency.ClaimParams
	store := claimSpy{Store: memstore.New(nil), seen: &seen}
	exec, err := idempotency.New(store, &idempotency.Config{Expired: idempotency.ExpiredRefused, RefusalHorizon: 5 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := idempotency.ComposeKey("usr_1", "createOrder", "5f0c2b8e-9d3a-4c71-8e2f-6b1a7d4c9e03")
	fp, _ := idempotency.NewFingerprint().String("a", "1").Sum()
	if _, err := exec.Do(context.Background(), idempotency.Request{Scope: "usr_1", Key: key, Fingerprint: fp},
		func(context.Context) (idempotency.Response, error) { return idempotency.Response{Code: 201}, nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].RefusalHorizon != 5*time.Hour || seen[0].RefuseFor() != 5*time.Hour {
		t.Fatalf("claims: %+v", seen)
	}
}

type claimSpy struct {
	idempotency.Store
	seen *[]idempotency.ClaimParams
}

func (s claimSpy) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	*s.seen = append(*s.seen, p)
	return s.Store.Claim(ctx, p)
}

// ClaimParams: RefuseFor is what a store keeps a tombstone for; a bad
// RefusalHorizon is refused by name before anything is stored.
func TestClaimParamsRefusalHorizon(t *testing.T) {
	t.Parallel()
	key, _ := idempotency.ComposeKey("usr_1", "createOrder", "5f0c2b8e-9d3a-4c71-8e2f-6b1a7d4c9e03")
	fp, _ := idempotency.NewFingerprint().String("a", "1").Sum()
	p := idempotency.ClaimParams{Scope: "usr_1", Key: key, Fingerprint: fp, LockTimeout: time.Second, Retention: time.Hour}
	for _, tc := range []struct {
		policy  idempotency.ExpiredPolicy
		horizon time.Duration
		want    time.Duration
	}{
		{idempotency.ExpiredIsNew, 0, 0},
		{idempotency.ExpiredRefused, 0, idempotency.DefaultRefusalHorizon},
		{idempotency.ExpiredRefused, time.Minute, time.Minute},
	} {
		q := p
		q.Expired, q.RefusalHorizon = tc.policy, tc.horizon
		if err := q.Validate(); err != nil || q.RefuseFor() != tc.want {
			t.Fatalf("%+v: RefuseFor = %s, %v; want %s", tc, q.RefuseFor(), err, tc.want)
		}
	}
	negative, underIsNew := p, p
	negative.Expired, negative.RefusalHorizon = idempotency.ExpiredRefused, -time.Hour
	underIsNew.RefusalHorizon = time.Hour
	for name, q := range map[string]idempotency.ClaimParams{"negative": negative, "under ExpiredIsNew": underIsNew} {
		var ie *idempotency.InvalidError
		if err := q.Validate(); !errors.As(err, &ie) || ie.Field != "RefusalHorizon" {
			t.Fatalf("%s: err = %v, want an InvalidError naming RefusalHorizon", name, err)
		}
		if _, err := memstore.New(nil).Claim(context.Background(), q); !errors.As(err, &ie) {
			t.Fatalf("%s: a store's claim: %v, want the same refusal", name, err)
		}
	}
}
