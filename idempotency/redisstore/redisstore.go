package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
)

// DefaultKeyPrefix is the prefix of every key the store writes when
// Config.KeyPrefix is empty.
const DefaultKeyPrefix = "payonce"

// Config configures a [Store]. The zero value (or a nil *Config) gives the
// defaults.
type Config struct {
	// KeyPrefix starts every key the store writes:
	// "<KeyPrefix>:{<scope>}:r:<key>" for a record. Stores with different
	// prefixes share a server without seeing each other. 1 to 64 bytes of
	// letters, digits and . _ : -. Default DefaultKeyPrefix ("payonce").
	KeyPrefix string
	// Keyring, when set, seals every stored response (headers and body)
	// with AES-256-GCM under its current key and opens it on replay and
	// Get, as pgstore's Config.Keyring does (see idempotency.Encrypted for
	// the format and rotation). Default nil: responses are stored as they
	// are.
	Keyring *idempotency.Keyring
	// WaitReplicas, when positive, makes every write that a failover must
	// not lose (a claim that takes a lease, a heartbeat, a complete) wait
	// until that many replicas of the key's primary acknowledge it (Redis
	// WAIT, on the same connection, right after the script), for at most
	// WaitTimeout. A claim not acknowledged in time is released and
	// answered with a *NotReplicatedError (SafeToRetry: true), never
	// executed; see the package documentation, Durability. Default 0: no
	// wait, writes are acknowledged by the primary alone.
	WaitReplicas int
	// WaitTimeout bounds each wait for WaitReplicas replicas (go-redis
	// reads WAIT's reply within it plus 10 s, whatever the client's
	// ReadTimeout). Required (positive) with WaitReplicas. Default 0,
	// valid only without WaitReplicas.
	WaitTimeout time.Duration
}

// Store is an [idempotency.Store] on Redis (7.0 or later), a standalone
// server or a Cluster. It is safe for concurrent use. Create it with [New]; see the
// package documentation for its guarantees.
type Store struct {
	rdb      redis.UniversalClient
	cluster  *redis.ClusterClient // rdb, when it is a Cluster's client
	prefix   string
	keyring  *idempotency.Keyring
	replicas int
	waitFor  time.Duration
}

var (
	_ idempotency.Store     = (*Store)(nil)
	_ idempotency.Abandoner = (*Store)(nil)
	_ idempotency.Sealer    = (*Store)(nil)
)

// New returns a Store over client: a standalone server's *redis.Client
// (also what redis.NewUniversalClient returns for one address or a
// Sentinel-managed primary), or a Redis Cluster's *redis.ClusterClient.
// A nil cfg means the defaults.
//
// Errors: an *idempotency.InvalidError naming the bad argument or field:
// a nil client, a Ring client (its shards share no slots the scripts can
// rely on), a bad Config.KeyPrefix, a negative Config.WaitReplicas, a
// Config.WaitTimeout missing, negative, or set without WaitReplicas.
func New(client redis.UniversalClient, cfg *Config) (*Store, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	s := &Store{rdb: client, prefix: cfg.KeyPrefix, keyring: cfg.Keyring, replicas: cfg.WaitReplicas, waitFor: cfg.WaitTimeout}
	switch c := client.(type) {
	case nil:
		return nil, &idempotency.InvalidError{Field: "client", Reason: "nil"}
	case *redis.Client:
	case *redis.ClusterClient:
		s.cluster = c
	default:
		return nil, &idempotency.InvalidError{Field: "client",
			Reason: fmt.Sprintf("%T is not supported: give a standalone server's *redis.Client or a Cluster's *redis.ClusterClient", client)}
	}
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	if err := validPrefix(s.prefix); err != nil {
		return nil, err
	}
	switch {
	case s.replicas < 0:
		return nil, &idempotency.InvalidError{Field: "Config.WaitReplicas",
			Reason: fmt.Sprintf("must be 0 (no wait) or a number of replicas, got %d", s.replicas)}
	case s.waitFor < 0:
		return nil, &idempotency.InvalidError{Field: "Config.WaitTimeout", Reason: "must be positive, got " + s.waitFor.String()}
	case s.replicas > 0 && s.waitFor == 0:
		return nil, &idempotency.InvalidError{Field: "Config.WaitTimeout",
			Reason: "required with Config.WaitReplicas (Redis would wait forever): set it, e.g. 500ms"}
	case s.replicas == 0 && s.waitFor > 0:
		return nil, &idempotency.InvalidError{Field: "Config.WaitTimeout",
			Reason: "set without Config.WaitReplicas, which says how many replicas to wait for: set both or neither"}
	}
	return s, nil
}

func validPrefix(p string) error {
	if len(p) > 64 {
		return &idempotency.InvalidError{Field: "Config.KeyPrefix", Reason: fmt.Sprintf("%d bytes, at most 64 allowed", len(p))}
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
			return &idempotency.InvalidError{Field: "Config.KeyPrefix",
				Reason: fmt.Sprintf("byte %d (%q) is not allowed: use letters, digits and . _ : -", i, c)}
		}
	}
	return nil
}

// Seals reports whether the store seals responses (Config.Keyring): an
// executor's replay cache then keeps nothing of it.
func (s *Store) Seals() bool { return s.keyring != nil }

// The keys of one scope share the hash tag {<scope>}: one Cluster slot.
func (s *Store) recordKey(scope, key string) string {
	return s.prefix + ":{" + scope + "}:r:" + key
}
func (s *Store) recordBase(scope string) string { return s.prefix + ":{" + scope + "}:r:" }
func (s *Store) dueKey(scope string) string     { return s.prefix + ":{" + scope + "}:due" }
func (s *Store) registryKey() string            { return s.prefix + ":prune" }
func (s *Store) ownersKey(key string) string    { return s.prefix + ":owners:{" + key + "}" }

// newVersion is the lock version of a new record: random below 2^30, as
// pgstore's, so that a key deleted (pruned, or expired by Redis) and
// claimed again does not hand out the fencing token of a holder that
// stalled since (odds of a collision: one in a billion).
func newVersion() int64 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint32(b[:]) >> 2)
}

// Claim implements [idempotency.Store.Claim]: one script, one round trip,
// decided in this order on the record as the server holds it, by the
// server's clock:
//
//   - absent: created PROCESSING (ClaimAcquired), at a random lock version.
//   - COMPLETED or FAILED and expired, or a tombstone: per p.Expired,
//     renewed as a new PROCESSING record at the next lock version
//     (ClaimAcquired) or refused (ClaimExpired).
//   - another fingerprint: ClaimMismatch, nothing changed or returned.
//   - COMPLETED or FAILED: ClaimReplay with the record and its response.
//   - PROCESSING with a live lease: ClaimInProgress with the time left.
//   - PROCESSING with an ended lease: ClaimReclaimed at the next version.
//
// With p.RefuseForeign, a key this scope has no record of is first looked
// up among the scopes that claimed it with RefuseForeign: a check, the
// list of those scopes, one live-check per other scope, the owners'
// update, then the claim (see the package documentation, Scopes).
//
// Errors: an *idempotency.InvalidError naming the bad field of p; the
// client's error (network, server), wrapped. On error nothing changed, or
// the claim's outcome is unknown to the caller (a lost reply).
func (s *Store) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	if err := p.Validate(); err != nil {
		return idempotency.Claim{}, err
	}
	mode := "create"
	if p.RefuseForeign {
		mode = "check"
	}
	c, err := s.claim(ctx, p, mode)
	if err != nil || c.State != 0 || !p.RefuseForeign {
		return c, err
	}
	// Absent: the key is this scope's to take unless another scope holds it.
	if foreign, err := s.foreign(ctx, p.Scope, p.Key); err != nil || foreign {
		return idempotency.Claim{State: idempotency.ClaimForeign}, err
	}
	if err := ownScript.Run(ctx, s.rdb, []string{s.ownersKey(p.Key)}, p.Scope, ms(2*p.Retention)).Err(); err != nil {
		return idempotency.Claim{}, s.wrap("claim", p.Key, err)
	}
	return s.claim(ctx, p, "create")
}

// claim runs claimScript; a zero State means "absent" (mode "check").
func (s *Store) claim(ctx context.Context, p idempotency.ClaimParams, mode string) (idempotency.Claim, error) {
	policy := "new"
	if p.Expired == idempotency.ExpiredRefused {
		policy = "refuse"
	}
	keys := []string{s.recordKey(p.Scope, p.Key), s.dueKey(p.Scope)}
	r := s.run(ctx, "claim", tookLease, claimScript, keys, p.Key, string(p.Fingerprint), ms(p.LockTimeout), ms(p.Retention),
		ms(p.RefuseFor()), policy, newVersion(), mode)
	out, err := r.Slice()
	if err != nil {
		return idempotency.Claim{}, s.wrap("claim", p.Key, err)
	}
	if r.notAcked != nil {
		// The lease may not survive a failover: give it back, unused.
		// Should the release fail too, the lease runs out by itself.
		l := idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: toInt(out[1])}
		_ = s.fenced(ctx, "release", l, nil, releaseScript, []string{keys[0]}, l.Version)
		return idempotency.Claim{}, s.wrap("claim", p.Key, r.notAcked)
	}
	lease := func(v any) idempotency.Lease {
		return idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: toInt(v)}
	}
	switch out[0] {
	case "absent":
		return idempotency.Claim{}, nil
	case "acquired":
		return idempotency.Claim{State: idempotency.ClaimAcquired, Lease: lease(out[1])}, nil
	case "reclaimed":
		return idempotency.Claim{State: idempotency.ClaimReclaimed, Lease: lease(out[1])}, nil
	case "mismatch":
		return idempotency.Claim{State: idempotency.ClaimMismatch}, nil
	case "expired":
		return idempotency.Claim{State: idempotency.ClaimExpired}, nil
	case "inprogress":
		rec := idempotency.Record{Scope: p.Scope, Key: p.Key, Status: idempotency.StatusProcessing, LockVersion: toInt(out[1])}
		return idempotency.Claim{State: idempotency.ClaimInProgress, Record: rec,
			RetryAfter: time.Duration(toInt(out[2])) * time.Millisecond}, nil
	case "replay":
		status := idempotency.Status(toString(out[1]))
		resp, err := s.decodeResponse(p.Scope, p.Key, status, out[2], out[3], out[4])
		if err != nil {
			return idempotency.Claim{}, err
		}
		rec := idempotency.Record{Scope: p.Scope, Key: p.Key, Status: status, Response: &resp,
			LockVersion: toInt(out[5]), ExpiresAt: fromMs(toInt(out[6]))}
		return idempotency.Claim{State: idempotency.ClaimReplay, Record: rec, StoreNow: fromMs(toInt(out[7]))}, nil
	}
	return idempotency.Claim{}, fmt.Errorf("redisstore: claim of key %s: unexpected reply %v", idempotency.ShortHash(p.Key), out[0])
}

// tookLease reports a claim's reply that hands out a lease: the write a
// failover must not lose before the action runs.
func tookLease(c *redis.Cmd) bool {
	out, err := c.Slice()
	return err == nil && len(out) > 1 && (out[0] == "acquired" || out[0] == "reclaimed")
}

// wrote reports a fenced script's reply of 1 (or more): it wrote.
func wrote(c *redis.Cmd) bool {
	n, err := c.Int64()
	return err == nil && n > 0
}

// foreign reports whether a scope other than scope holds a live record of
// key, among those that claimed it with RefuseForeign. Scopes whose
// record is gone are dropped from the key's owners.
func (s *Store) foreign(ctx context.Context, scope, key string) (bool, error) {
	owners, err := s.rdb.SMembers(ctx, s.ownersKey(key)).Result()
	if err != nil {
		return false, s.wrap("claim", key, err)
	}
	for _, other := range owners {
		if other == scope {
			continue
		}
		live, err := liveScript.Run(ctx, s.rdb, []string{s.recordKey(other, key)}).Int()
		if err != nil {
			return false, s.wrap("claim", key, err)
		}
		if live == 1 {
			return true, nil
		}
	}
	return false, nil
}

// Complete implements [idempotency.Store.Complete]: one script. The lease
// need not be live: a holder whose lease ran out may complete as long as
// nobody took the record over, which the lock version tells.
//
// Errors: idempotency.ErrLeaseLost when the record is absent, not
// PROCESSING or at another lock version; an *idempotency.InvalidError
// naming Completion.Status or Completion.Retention; the client's error,
// wrapped. On error nothing changed, or (a lost reply) the outcome is
// unknown to the caller.
func (s *Store) Complete(ctx context.Context, l idempotency.Lease, c idempotency.Completion) error {
	if c.Status != idempotency.StatusCompleted && c.Status != idempotency.StatusFailed {
		return &idempotency.InvalidError{Field: "Completion.Status", Reason: fmt.Sprintf("must be COMPLETED or FAILED, got %q", c.Status)}
	}
	if c.Retention <= 0 {
		return &idempotency.InvalidError{Field: "Completion.Retention", Reason: "must be positive, got " + c.Retention.String()}
	}
	resp := c.Response
	if s.keyring != nil {
		sealed, err := s.keyring.Seal(l.Scope, l.Key, c.Status, resp)
		if err != nil {
			return err
		}
		resp = sealed
	}
	var hdr []byte
	if len(resp.Header) > 0 {
		var err error
		if hdr, err = json.Marshal(resp.Header); err != nil {
			return &idempotency.InvalidError{Field: "Response.Header", Reason: err.Error()}
		}
	}
	keys := []string{s.recordKey(l.Scope, l.Key), s.dueKey(l.Scope)}
	r := s.run(ctx, "complete", wrote, completeScript, keys, l.Version, string(c.Status), resp.Code, hdr, resp.Body,
		ms(c.Retention), l.Key)
	ea, err := r.Int64()
	if err != nil {
		return s.wrap("complete", l.Key, err)
	}
	if ea == 0 {
		return idempotency.ErrLeaseLost
	}
	// The prune registry lives in a slot of its own: a second command.
	// Should it fail, the outcome stands; see the package documentation,
	// Keys and expiry.
	_ = s.rdb.ZAddLT(ctx, s.registryKey(), redis.Z{Score: float64(ea), Member: l.Scope}).Err()
	if r.notAcked != nil {
		return s.wrap("complete", l.Key, r.notAcked)
	}
	return nil
}

// Release implements [idempotency.Store.Release]: the lease ends now, by
// the server's clock, and the record stays PROCESSING.
//
// Errors: idempotency.ErrLeaseLost as for [Store.Complete]; the client's
// error, wrapped.
func (s *Store) Release(ctx context.Context, l idempotency.Lease) error {
	return s.fenced(ctx, "release", l, nil, releaseScript, []string{s.recordKey(l.Scope, l.Key)}, l.Version)
}

// Heartbeat implements [idempotency.Store.Heartbeat]: the lease ends d
// from now, by the server's clock.
//
// Errors: as for [Store.Release], and an *idempotency.InvalidError naming
// d when it is not positive.
func (s *Store) Heartbeat(ctx context.Context, l idempotency.Lease, d time.Duration) error {
	if d <= 0 {
		return &idempotency.InvalidError{Field: "d", Reason: "heartbeat extension must be positive, got " + d.String()}
	}
	return s.fenced(ctx, "heartbeat", l, wrote, heartbeatScript, []string{s.recordKey(l.Scope, l.Key)}, l.Version, ms(d))
}

// Abandon implements [idempotency.Abandoner]: the PROCESSING record held
// by l is deleted, as if never claimed.
//
// Errors: as for [Store.Release].
func (s *Store) Abandon(ctx context.Context, l idempotency.Lease) error {
	return s.fenced(ctx, "abandon", l, nil, abandonScript, []string{s.recordKey(l.Scope, l.Key)}, l.Version)
}

// fenced runs one of the scripts guarded by the lock version: 1 done, 0
// lease lost. With acked set, the write waits for Config.WaitReplicas.
func (s *Store) fenced(ctx context.Context, op string, l idempotency.Lease, acked func(*redis.Cmd) bool, script *redis.Script, keys []string, args ...any) error {
	r := s.run(ctx, op, acked, script, keys, args...)
	n, err := r.Int()
	if err != nil {
		return s.wrap(op, l.Key, err)
	}
	if n == 0 {
		return idempotency.ErrLeaseLost
	}
	if r.notAcked != nil {
		return s.wrap(op, l.Key, r.notAcked)
	}
	return nil
}

// Get implements [idempotency.Store.Get]: one HMGET. An expired record not
// yet pruned (nor expired by Redis) is returned as it is; its ExpiresAt
// tells. A tombstone has RefuseUntil set and no Response.
//
// Errors: idempotency.ErrNotFound; idempotency.ErrUndecryptable (wrapped)
// for a sealed response the keyring cannot open; the client's error,
// wrapped.
func (s *Store) Get(ctx context.Context, scope, key string) (idempotency.Record, error) {
	f, err := s.rdb.HMGet(ctx, s.recordKey(scope, key), "fp", "st", "v", "lu", "ca", "co", "ea", "ru", "code", "hdr", "body").Result()
	if err != nil {
		return idempotency.Record{}, s.wrap("get", key, err)
	}
	if f[1] == nil {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	rec := idempotency.Record{Scope: scope, Key: key, Fingerprint: idempotency.Fingerprint(toString(f[0])),
		Status: idempotency.Status(toString(f[1])), LockVersion: toInt(f[2]),
		LockedUntil: fromMs(toInt(f[3])), CreatedAt: fromMs(toInt(f[4])), CompletedAt: fromMs(toInt(f[5])),
		ExpiresAt: fromMs(toInt(f[6])), RefuseUntil: fromMs(toInt(f[7]))}
	if rec.Status != idempotency.StatusProcessing && f[7] == nil {
		resp, err := s.decodeResponse(scope, key, rec.Status, f[8], f[9], f[10])
		if err != nil {
			return idempotency.Record{}, err
		}
		rec.Response = &resp
	}
	return rec, nil
}

// Prune implements [idempotency.Store.Prune]: it takes the scopes with
// records due from the prune registry, soonest first, and prunes each in
// one script, until limit records are taken or none is due. Redis deletes
// each record by itself too (PEXPIREAT) once nothing can need it: what
// Prune adds is the tombstone (the response deleted at expiry, not at the
// end of the refusal horizon) and the count.
//
// Errors: an *idempotency.InvalidError when limit is not positive; the
// client's error, wrapped.
func (s *Store) Prune(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, &idempotency.InvalidError{Field: "limit", Reason: fmt.Sprintf("must be positive, got %d", limit)}
	}
	reg := s.registryKey()
	total := 0
	for total < limit {
		scope, err := dueScopeScript.Run(ctx, s.rdb, []string{reg}).Text()
		if errors.Is(err, redis.Nil) {
			break
		}
		if err != nil {
			return total, s.wrap("prune", "", err)
		}
		due := s.dueKey(scope)
		out, err := pruneScopeScript.Run(ctx, s.rdb, []string{due}, s.recordBase(scope), limit-total).Slice()
		if err != nil {
			return total, s.wrap("prune", "", err)
		}
		total += int(toInt(out[0]))
		if err := s.refile(ctx, scope, due, out[1]); err != nil {
			return total, s.wrap("prune", "", err)
		}
	}
	return total, nil
}

// refile files scope in the prune registry at next, its due index's
// earliest instant after the prune (nil: none left, the scope leaves the
// registry). The registry is in a slot of its own, so this is a command
// apart from the prune's script: a Complete in the scope may have lowered
// the scope's instant in between (ZADD LT), which refiling would undo.
// Hence the due index is read once more afterwards, and the scope filed
// again at its earliest instant if that is sooner.
func (s *Store) refile(ctx context.Context, scope, due string, next any) error {
	reg := s.registryKey()
	var err error
	if next == nil {
		err = s.rdb.ZRem(ctx, reg, scope).Err()
	} else {
		err = s.rdb.ZAdd(ctx, reg, redis.Z{Score: float64(toInt(next)), Member: scope}).Err()
	}
	if err != nil {
		return err
	}
	first, err := s.rdb.ZRangeWithScores(ctx, due, 0, 0).Result()
	if err != nil || len(first) == 0 {
		return err
	}
	return s.rdb.ZAddLT(ctx, reg, redis.Z{Score: first[0].Score, Member: scope}).Err()
}

// decodeResponse rebuilds a stored response, opening it when sealed.
func (s *Store) decodeResponse(scope, key string, status idempotency.Status, code, hdr, body any) (idempotency.Response, error) {
	r := idempotency.Response{Code: int(toInt(code)), Body: []byte(toString(body))}
	if h := toString(hdr); h != "" {
		if err := json.Unmarshal([]byte(h), &r.Header); err != nil {
			return r, fmt.Errorf("redisstore: stored response headers of key %s are not valid: %w", idempotency.ShortHash(key), err)
		}
	}
	if s.keyring == nil {
		return r, nil
	}
	return s.keyring.Open(scope, key, status, r)
}

// wrap names the operation and a short hash of the key, never the key.
func (s *Store) wrap(op, key string, err error) error {
	if key == "" {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return fmt.Errorf("redisstore: %s of key %s: %w", op, idempotency.ShortHash(key), err)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func fromMs(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// toInt reads an integer reply, or a number stored as a string.
func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			f, _ := strconv.ParseFloat(x, 64)
			return int64(f)
		}
		return n
	}
	return 0
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}
