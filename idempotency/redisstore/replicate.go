package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated: a write was not acknowledged by Config.WaitReplicas
// replicas within Config.WaitTimeout. Returned wrapped in a
// *NotReplicatedError.
var ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")

// NotReplicatedError reports a write of Op ("claim", "heartbeat" or
// "complete") that the key's primary made but fewer than Want of its
// replicas acknowledged in time (Acked; -1 when the connection failed
// before WAIT answered).
//
// For a claim, the lease was given back (or will run out by itself when
// the release failed too) and the action did not run: SafeToRetry is
// true, and the HTTP middleware answers 503 with Retry-After. For a
// complete, the action ran and its outcome is on the primary: a retry
// replays it, unless a failover lost it, and then the retry runs the
// action again; SafeToRetry is false, as for any outcome not recorded.
type NotReplicatedError struct {
	Op          string
	Acked, Want int
	// Err is the client's error when WAIT got no answer, else nil.
	Err error
}

func (e *NotReplicatedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: %s: WAIT %d got no answer: %v", ErrNotReplicated, e.Op, e.Want, e.Err)
	}
	return fmt.Sprintf("%v: %s acknowledged by %d of %d replicas", ErrNotReplicated, e.Op, e.Acked, e.Want)
}

// Is reports ErrNotReplicated.
func (e *NotReplicatedError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns the client's error, if any.
func (e *NotReplicatedError) Unwrap() error { return e.Err }

// SafeToRetry reports true for a claim or a heartbeat (nothing ran on
// their account), false for a complete (the action ran).
func (e *NotReplicatedError) SafeToRetry() bool { return e.Op != "complete" }

// reply is a script's reply, and with Config.WaitReplicas whether enough
// replicas acknowledged the write it made.
type reply struct {
	*redis.Cmd
	// notAcked is nil when the write needs no wait or was acknowledged.
	notAcked *NotReplicatedError
}

// run runs script on the primary that holds keys[0] (every key of a
// script shares its slot). With Config.WaitReplicas positive and acked
// given, and when acked says the reply is of a write that must survive a
// failover, WAIT follows the script on the same connection: WAIT counts
// the replicas that acknowledged the connection's last write. A script
// cannot call WAIT itself, and a Cluster client would send a keyless WAIT
// to any node, so both go over one connection of the key's primary's own
// client (ClusterClient.MasterForKey). WAIT is a second round trip, sent
// only after a write that needs it: a replay or an "in progress" answer
// never waits on a slow replica.
//
// A redirection (MOVED, ASK: the slot moved, say after a failover) or
// TRYAGAIN/CLUSTERDOWN means the script did not run: run reloads the
// Cluster's slots and tries again, a few times, bounded by ctx.
func (s *Store) run(ctx context.Context, op string, acked func(*redis.Cmd) bool, script *redis.Script, keys []string, args ...any) reply {
	if acked == nil || s.replicas == 0 {
		return reply{Cmd: script.Run(ctx, s.rdb, keys, args...)}
	}
	for attempt := 0; ; attempt++ {
		node, err := s.primary(ctx, keys[0])
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return reply{Cmd: cmd}
		}
		r, retry := s.runOn(ctx, node, op, acked, script, keys, args...)
		if !retry || attempt == 4 {
			return r
		}
		s.cluster.ReloadState(ctx)
		select {
		case <-ctx.Done():
			return r
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond): // let the reload land
		}
	}
}

// runOn is one attempt of run on node; retry reports a redirection.
func (s *Store) runOn(ctx context.Context, node *redis.Client, op string, acked func(*redis.Cmd) bool, script *redis.Script, keys []string, args ...any) (r reply, retry bool) {
	conn := node.Conn()
	defer conn.Close()
	cmd := script.Run(ctx, conn, keys, args...)
	if err := cmd.Err(); err != nil {
		var re redis.Error
		if s.cluster != nil && !errors.As(err, &re) {
			// Not the server's answer (a node down, say): the slots may
			// have moved; the caller's retry finds them.
			s.cluster.ReloadState(ctx)
		}
		return reply{Cmd: cmd}, s.cluster != nil && redirected(err)
	}
	if !acked(cmd) {
		return reply{Cmd: cmd}, false
	}
	n, err := conn.Wait(ctx, s.replicas, s.waitFor).Result()
	switch {
	case err != nil:
		return reply{Cmd: cmd, notAcked: &NotReplicatedError{Op: op, Acked: -1, Want: s.replicas, Err: err}}, false
	case n < int64(s.replicas):
		return reply{Cmd: cmd, notAcked: &NotReplicatedError{Op: op, Acked: int(n), Want: s.replicas}}, false
	}
	return reply{Cmd: cmd}, false
}

// primary returns the client of the primary that holds key.
func (s *Store) primary(ctx context.Context, key string) (*redis.Client, error) {
	if s.cluster == nil {
		return s.rdb.(*redis.Client), nil
	}
	return s.cluster.MasterForKey(ctx, key)
}

// redirected reports an error after which the script surely did not run
// on this node: the slot is elsewhere, or the Cluster cannot serve it yet.
func redirected(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	return redis.IsTryAgainError(err) || redis.IsClusterDownError(err)
}
