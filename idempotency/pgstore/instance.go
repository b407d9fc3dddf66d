package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/payonce/payonce/idempotency"
)

// InstanceEnv is the environment variable that conventionally holds a
// process's instance name for Config.Instance:
//
//	store, err := pgstore.New(pool, &pgstore.Config{Instance: os.Getenv(pgstore.InstanceEnv)})
//
// The store never reads it itself: a name shared by two live processes
// (an environment copied to every replica) would let each end the other's
// leases, so the name is the application's decision.
const InstanceEnv = "PAYONCE_INSTANCE"

// maxInstance is the width of holder_instance (migration 0017).
const maxInstance = 128

func validateInstance(name string) error {
	if len(name) > maxInstance {
		return &idempotency.InvalidError{Field: "Config.Instance",
			Reason: fmt.Sprintf("%d bytes, at most %d: use a short stable name such as the pod's or the unit's", len(name), maxInstance)}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '_' || c == '-' || c == ':' || c == '@' || c == '/':
		default:
			return &idempotency.InvalidError{Field: "Config.Instance",
				Reason: fmt.Sprintf("byte %d (%q) is not allowed: use letters, digits and . _ - : @ /", i, c)}
		}
	}
	return nil
}

var (
	incarnationOnce sync.Once
	incarnation     int64
)

// processIncarnation is this process's random incarnation id, the same
// for every store of the process, never 0.
func processIncarnation() int64 {
	incarnationOnce.Do(func() {
		var b [8]byte
		for incarnation == 0 {
			if _, err := rand.Read(b[:]); err != nil {
				panic(err) // crypto/rand does not fail on supported platforms
			}
			incarnation = int64(binary.LittleEndian.Uint64(b[:]) >> 1)
		}
	})
	return incarnation
}

// releaseHeld ends the live leases of the instance's earlier
// incarnations (releaseHeldSQL), within New's time bound.
func (s *Store) releaseHeld() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), schemaCheckTimeout)
	defer cancel()
	var n int64
	if err := s.pool.QueryRow(ctx, releaseHeldSQL, s.instance, s.incarnation).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore.New: end the leases of instance %q's earlier incarnations: %w", s.instance, translate("release_held", err))
	}
	return int(n), nil
}

// ReleasedAtStart reports how many live leases of earlier incarnations of
// Config.Instance [New] ended (0 without an instance): keys whose holder
// died mid-action, which a retry now finishes at once.
func (s *Store) ReleasedAtStart() int { return s.released }

// Instance returns Config.Instance and this process's incarnation id (0
// without an instance), as leases taken by the store record them.
func (s *Store) Instance() (name string, incarnation int64) { return s.instance, s.incarnation }
