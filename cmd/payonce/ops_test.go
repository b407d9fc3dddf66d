package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/internal/cli/clitest"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
)

// run is runCLI for the operator commands' tests.
func run(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	return runCLI(t, clitest.QuickExit(env), args...)
}

// cliStdin is run with stdin read from r (nil: the null device).
func cliStdin(t *testing.T, stdin io.Reader, env []string, args ...string) (string, int) {
	t.Helper()
	return payonce.Run(t, stdin, clitest.QuickExit(env), args...)
}

// opsBundle is a migrated schema of the test's own, its URL for the CLI,
// and a store on it.
type opsBundle struct {
	url   string
	pool  *pgxpool.Pool
	store *pgstore.Store
}

func setupOps(t *testing.T) opsBundle {
	t.Helper()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return opsBundle{url: url, pool: pool, store: store}
}

var testFingerprint = idempotency.Fingerprint(strings.Repeat("ab", 32))

// claim claims (scope, key) with the given lease and fails the test unless
// the claim acquired it.
func (b opsBundle) claim(t *testing.T, scope, key string, lock time.Duration) idempotency.Lease {
	t.Helper()
	c, err := b.store.Claim(context.Background(), idempotency.ClaimParams{Scope: scope, Key: key,
		Fingerprint: testFingerprint, LockTimeout: lock, Retention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c.State != idempotency.ClaimAcquired {
		t.Fatalf("claim %s: %v, want acquired", key, c.State)
	}
	return c.Lease
}

// plantStuck claims keys with a 20ms lease and waits until, on the
// database clock, every lease ended at least 200ms ago.
func (b opsBundle) plantStuck(t *testing.T, scope string, keys ...string) []idempotency.Lease {
	t.Helper()
	var leases []idempotency.Lease
	for _, k := range keys {
		leases = append(leases, b.claim(t, scope, k, 20*time.Millisecond))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var ended bool
		err := b.pool.QueryRow(context.Background(), `SELECT bool_and(locked_until <= now() - interval '200 ms')
			FROM idempotency_store WHERE user_id = $1 AND idempotency_key = ANY($2)`, scope, keys).Scan(&ended)
		if err != nil {
			t.Fatal(err)
		}
		if ended {
			return leases
		}
		if time.Now().After(deadline) {
			t.Fatal("the planted leases did not end")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// row is the part of a record release may change.
type row struct {
	status      string
	version     int64
	lockedUntil *time.Time
}

func (b opsBundle) row(t *testing.T, scope, key string) row {
	t.Helper()
	var r row
	err := b.pool.QueryRow(context.Background(), `SELECT status, lock_version, locked_until FROM idempotency_store
		WHERE user_id = $1 AND idempotency_key = $2`, scope, key).Scan(&r.status, &r.version, &r.lockedUntil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (b opsBundle) auditRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM operator_audit`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStuckListsStuckRecordsOnly(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := context.Background()
	const scope = "usr_7fQ9x"
	older, newer := scope+"_charge_order1", scope+"_createOrder_a1b2c3d4"
	b.plantStuck(t, scope, older)
	b.plantStuck(t, scope, newer)
	live := scope + "_charge_live"
	b.claim(t, scope, live, time.Hour)
	done := scope + "_charge_done"
	l := b.claim(t, scope, done, 20*time.Millisecond)
	if err := b.store.Complete(ctx, l, idempotency.Completion{Status: idempotency.StatusCompleted,
		Response: idempotency.Response{Code: 200}, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO payment_intents (idempotency_key, user_id, kind, provider, provider_key,
		amount, currency, recipient, payment_method) VALUES ($1, $2, 'CHARGE', 'stripe', 'pk', 10, 'EUR', 'acct', 'pm_card_visa')`,
		older, scope); err != nil {
		t.Fatal(err)
	}

	out, code := run(t, nil, "stuck", "--older-than", "100ms", "--database-url", b.url)
	if code != 0 {
		t.Fatalf("stuck exited %d:\n%s", code, out)
	}
	ho, hn := idempotency.ShortHash(older), idempotency.ShortHash(newer)
	switch {
	case !strings.Contains(out, "2 record(s) stuck"):
		t.Fatalf("stuck does not count 2 records:\n%s", out)
	case !strings.Contains(out, ho) || !strings.Contains(out, hn) || strings.Index(out, ho) > strings.Index(out, hn):
		t.Fatalf("stuck does not list %s then %s (longest stuck first):\n%s", ho, hn, out)
	case strings.Contains(out, older) || strings.Contains(out, newer):
		t.Fatalf("stuck printed a full key without --show-keys:\n%s", out)
	case strings.Contains(out, idempotency.ShortHash(live)) || strings.Contains(out, idempotency.ShortHash(done)):
		t.Fatalf("stuck lists a live lease or a completed record:\n%s", out)
	case !strings.Contains(out, "stripe PENDING, attempt 0") || !strings.Contains(out, "createOrder"):
		t.Fatalf("stuck lacks the intent or the action:\n%s", out)
	}

	out, code = run(t, nil, "stuck", "--older-than", "100ms", "--show-keys", "--database-url", b.url)
	if code != 0 || !strings.Contains(out, older) || !strings.Contains(out, newer) {
		t.Fatalf("stuck --show-keys (exit %d) lacks the keys:\n%s", code, out)
	}

	out, code = run(t, nil, "stuck", "--older-than", "100ms", "--limit", "1", "--format", "json", "--database-url", b.url)
	if code != 0 {
		t.Fatalf("stuck --format json exited %d:\n%s", code, out)
	}
	var rep stuckReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stuck --format json: %v:\n%s", err, out)
	}
	if rep.Total != 2 || len(rep.Records) != 1 {
		t.Fatalf("json: total %d, %d records; want 2 and 1 (--limit 1)", rep.Total, len(rep.Records))
	}
	r := rep.Records[0]
	if r.KeyHash != ho || r.Key != "" || r.Scope != scope || r.Action != "charge" || r.Intent == nil ||
		r.LeaseEndedSecondsAgo < 0.1 || r.AgeSeconds < r.LeaseEndedSecondsAgo {
		t.Fatalf("json record: %+v", r)
	}

	// A threshold longer than the planted leases' ends lists nothing.
	out, code = run(t, nil, "stuck", "--older-than", "1h", "--database-url", b.url)
	if code != 0 || !strings.Contains(out, "no record stuck") {
		t.Fatalf("stuck --older-than 1h (exit %d):\n%s", code, out)
	}
}

func TestReleaseStuckRecord(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := context.Background()
	const scope, key = "usr_1", "usr_1_charge_order42"
	old := b.plantStuck(t, scope, key)[0]
	before := b.row(t, scope, key)

	out, code := run(t, []string{"USER=alice"}, "release", scope, key, "--yes", "--reason", "INC-1234", "--database-url", b.url)
	if code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("release exited %d:\n%s", code, out)
	}
	if strings.Contains(out, key) {
		t.Fatalf("release printed the full key:\n%s", out)
	}
	// The lease had ended: the record is unchanged, still PROCESSING
	// under its lock version, its lease end kept.
	if after := b.row(t, scope, key); after.status != "PROCESSING" || after.version != old.Version ||
		!after.lockedUntil.Equal(*before.lockedUntil) {
		t.Fatalf("after release: %+v, before %+v", after, before)
	}
	var (
		actor, dbUser, command, gotScope, keyHash string
		detail                                    map[string]any
	)
	err := b.pool.QueryRow(ctx, `SELECT actor, db_user, command, scope, key_sha256, detail FROM operator_audit`).
		Scan(&actor, &dbUser, &command, &gotScope, &keyHash, &detail)
	if err != nil {
		t.Fatalf("audit row: %v", err)
	}
	sum := sha256.Sum256([]byte(key))
	if actor != "alice" || dbUser == "" || command != "release" || gotScope != scope || keyHash != hex.EncodeToString(sum[:]) ||
		detail["reason"] != "INC-1234" || detail["lock_version"] != float64(old.Version) || detail["forced"] != false ||
		detail["lease_live"] != false || !strings.HasPrefix(keyHash, idempotency.ShortHash(key)) {
		t.Fatalf("audit row: actor %q db_user %q command %q scope %q key %q detail %v", actor, dbUser, command, gotScope, keyHash, detail)
	}
	if n := b.auditRows(t); n != 1 {
		t.Fatalf("%d audit rows, want 1", n)
	}

	// A retry reclaims the record, and the old holder is fenced out.
	c, err := b.store.Claim(ctx, idempotency.ClaimParams{Scope: scope, Key: key, Fingerprint: testFingerprint,
		LockTimeout: time.Minute, Retention: time.Hour})
	if err != nil || c.State != idempotency.ClaimReclaimed || c.Lease.Version != old.Version+1 {
		t.Fatalf("claim after release: %+v, %v; want reclaimed at version %d", c, err, old.Version+1)
	}
	if err := b.store.Complete(ctx, old, idempotency.Completion{Status: idempotency.StatusCompleted,
		Response: idempotency.Response{Code: 200}, Retention: time.Hour}); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the old holder's completion: %v, want ErrLeaseLost", err)
	}
}

func TestReleaseNeedsYesWithoutTerminal(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	const scope, key = "usr_1", "usr_1_charge_order42"
	b.plantStuck(t, scope, key)
	before := b.row(t, scope, key)
	// No stdin (the null device), and a pipe that even says yes.
	for _, stdin := range []io.Reader{nil, strings.NewReader("y\n")} {
		out, code := cliStdin(t, stdin, nil, "release", scope, key, "--database-url", b.url)
		if code != 2 || !strings.Contains(out, "--yes") || !strings.Contains(out, "nothing changed") {
			t.Fatalf("release without --yes on a non-terminal: exit %d, want 2:\n%s", code, out)
		}
	}
	if after := b.row(t, scope, key); after.version != before.version || !after.lockedUntil.Equal(*before.lockedUntil) {
		t.Fatalf("the record changed: %+v, before %+v", after, before)
	}
	if n := b.auditRows(t); n != 0 {
		t.Fatalf("%d audit rows, want 0", n)
	}
}

func TestReleaseLiveLeaseNeedsForce(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := context.Background()
	const scope, key = "usr_1", "usr_1_charge_order42"
	holder := b.claim(t, scope, key, time.Hour)
	before := b.row(t, scope, key)

	out, code := run(t, nil, "release", scope, key, "--yes", "--database-url", b.url)
	if code != exitRefused || !strings.Contains(out, "lease is live") {
		t.Fatalf("release of a live lease: exit %d, want %d:\n%s", code, exitRefused, out)
	}
	if after := b.row(t, scope, key); !after.lockedUntil.Equal(*before.lockedUntil) || b.auditRows(t) != 0 {
		t.Fatalf("a refused release changed something: %+v, %d audit rows", after, b.auditRows(t))
	}

	out, code = run(t, nil, "release", scope, key, "--yes", "--force", "--database-url", b.url)
	if code != 0 {
		t.Fatalf("release --force exited %d:\n%s", code, out)
	}
	var ended bool
	var detail map[string]any
	if err := b.pool.QueryRow(ctx, `SELECT locked_until <= now() FROM idempotency_store`).Scan(&ended); err != nil || !ended {
		t.Fatalf("the forced release left the lease live (%v)", err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT detail FROM operator_audit`).Scan(&detail); err != nil ||
		detail["forced"] != true || detail["lease_live"] != true {
		t.Fatalf("audit detail %v (%v)", detail, err)
	}
	// Two holders now: the retry reclaims at once, and only its outcome
	// can be recorded.
	c, err := b.store.Claim(ctx, idempotency.ClaimParams{Scope: scope, Key: key, Fingerprint: testFingerprint,
		LockTimeout: time.Minute, Retention: time.Hour})
	if err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatalf("claim after a forced release: %+v, %v; want reclaimed", c, err)
	}
	ok := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201}, Retention: time.Hour}
	if err := b.store.Complete(ctx, holder, ok); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the first holder's completion: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Complete(ctx, c.Lease, ok); err != nil {
		t.Fatal(err)
	}

	// A completed record has no lease to release, --force or not.
	out, code = run(t, nil, "release", scope, key, "--yes", "--force", "--database-url", b.url)
	if code != exitRefused || !strings.Contains(out, "COMPLETED") {
		t.Fatalf("release of a completed record: exit %d:\n%s", code, out)
	}
	// An unknown key is a failure that names the key by its hash only.
	out, code = run(t, nil, "release", scope, "usr_1_charge_nope", "--yes", "--database-url", b.url)
	if code != 1 || !strings.Contains(out, idempotency.ShortHash("usr_1_charge_nope")) || strings.Contains(out, "usr_1_charge_nope") {
		t.Fatalf("release of an unknown key: exit %d:\n%s", code, out)
	}
	if n := b.auditRows(t); n != 1 {
		t.Fatalf("%d audit rows, want 1", n)
	}
}

// The release is fenced by the lock version it showed: whatever happens
// to the record between showing it and releasing it is never overwritten.
func TestReleaseFencedByShownLockVersion(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := context.Background()
	const scope = "usr_1"
	ok := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 200}, Retention: time.Hour}

	// The holder completes after the record was shown.
	k1 := scope + "_charge_completed"
	l1 := b.plantStuck(t, scope, k1)[0]
	shown, err := readReleaseTarget(ctx, b.pool, scope, k1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Complete(ctx, l1, ok); err != nil {
		t.Fatal(err)
	}
	if _, err := releaseRecord(ctx, b.pool, shown, true, ""); !isRefused(err) {
		t.Fatalf("release after the holder completed: %v, want refused", err)
	}
	if r := b.row(t, scope, k1); r.status != "COMPLETED" || r.lockedUntil != nil {
		t.Fatalf("the completed record was touched: %+v", r)
	}

	// A retry reclaims the record after it was shown: its new lease stays.
	k2 := scope + "_charge_reclaimed"
	b.plantStuck(t, scope, k2)
	shown, err = readReleaseTarget(ctx, b.pool, scope, k2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.store.Claim(ctx, idempotency.ClaimParams{Scope: scope, Key: k2, Fingerprint: testFingerprint,
		LockTimeout: time.Hour, Retention: 2 * time.Hour})
	if err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatalf("reclaim: %+v, %v", c, err)
	}
	_, err = releaseRecord(ctx, b.pool, shown, true, "")
	if !isRefused(err) || !strings.Contains(err.Error(), "reclaimed") {
		t.Fatalf("release after a reclaim: %v, want refused", err)
	}
	if err := b.store.Complete(ctx, c.Lease, ok); err != nil {
		t.Fatalf("the new holder lost its lease to a stale release: %v", err)
	}

	// The holder extends its ended lease (heartbeat) after it was shown:
	// without --force, a now live lease is not released.
	k3 := scope + "_charge_heartbeat"
	l3 := b.plantStuck(t, scope, k3)[0]
	shown, err = readReleaseTarget(ctx, b.pool, scope, k3)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Heartbeat(ctx, l3, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := releaseRecord(ctx, b.pool, shown, false, ""); !isRefused(err) || !strings.Contains(err.Error(), "extended") {
		t.Fatalf("release after a heartbeat: %v, want refused", err)
	}
	if err := b.store.Complete(ctx, l3, ok); err != nil {
		t.Fatalf("the holder lost its lease to a stale release: %v", err)
	}
	if n := b.auditRows(t); n != 0 {
		t.Fatalf("%d audit rows after refused releases, want 0", n)
	}
}

func isRefused(err error) bool {
	var x cli.ExitError
	return errors.As(err, &x) && x.Code == exitRefused
}

func TestPruneDeletesExpiredOnly(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := context.Background()
	// 2500 expired records, 10 live ones, and 5 PROCESSING records past
	// their expiry, which a prune never deletes.
	if _, err := b.pool.Exec(ctx, `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, expires_at)
		SELECT 'usr_1_x_' || g, 'usr_1', repeat('a', 64), CASE WHEN g % 2 = 0 THEN 'COMPLETED' ELSE 'FAILED' END,
		       now() - interval '1 hour'
		  FROM generate_series(1, 2500) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at)
		SELECT 'usr_1_p_' || g, 'usr_1', repeat('a', 64), 'PROCESSING', 1, now() - interval '2 hours', now() - interval '1 hour'
		  FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		l := b.claim(t, "usr_2", fmt.Sprintf("usr_2_charge_%d", i), time.Minute)
		if err := b.store.Complete(ctx, l, idempotency.Completion{Status: idempotency.StatusCompleted,
			Response: idempotency.Response{Code: 200}, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(where string) int {
		var n int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_store WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	out, code := run(t, nil, "prune", "--batch", "1000", "--limit", "1200", "--pause", "0", "--database-url", b.url)
	if code != 0 || !strings.Contains(out, "pruned 1200 expired record(s) in 2 batch(es)") || !strings.Contains(out, "stopped at --limit 1200") {
		t.Fatalf("prune --limit 1200 (exit %d):\n%s", code, out)
	}
	if n := count(`status <> 'PROCESSING' AND expires_at <= now()`); n != 1300 {
		t.Fatalf("%d expired records left after --limit 1200, want 1300", n)
	}
	out, code = run(t, nil, "prune", "--batch", "1000", "--database-url", b.url)
	if code != 0 || !strings.Contains(out, "pruned 1300 expired record(s) in 2 batch(es)") || !strings.Contains(out, "nothing expired is left") {
		t.Fatalf("prune (exit %d):\n%s", code, out)
	}
	if strings.Contains(out, "\r") {
		t.Fatalf("prune drew a progress bar on a non-terminal:\n%q", out)
	}
	if expired, live, processing := count(`status <> 'PROCESSING' AND expires_at <= now()`),
		count(`status = 'COMPLETED' AND expires_at > now()`), count(`status = 'PROCESSING'`); expired != 0 || live != 10 || processing != 5 {
		t.Fatalf("after prune: %d expired, %d live, %d processing; want 0, 10, 5", expired, live, processing)
	}
}

// prunePass stops exactly at its limit, reports a short batch as drained,
// and counts what it deleted when interrupted.
func TestPrunePass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &fakePruneStore{left: 2500}
	var calls int
	res, err := prunePass(ctx, s, 1000, 1200, 0, func(pruneResult) { calls++ })
	if err != nil || res.deleted != 1200 || res.batches != 2 || res.drained || s.left != 1300 || calls != 2 || s.asked[1] != 200 {
		t.Fatalf("limit 1200: %+v, %v, left %d, asked %v", res, err, s.left, s.asked)
	}
	res, err = prunePass(ctx, s, 1000, 0, 0, func(pruneResult) {})
	if err != nil || res.deleted != 1300 || res.batches != 2 || !res.drained || s.left != 0 {
		t.Fatalf("no limit: %+v, %v, left %d", res, err, s.left)
	}
	cctx, cancel := context.WithCancel(ctx)
	s = &fakePruneStore{left: 5000}
	res, err = prunePass(cctx, s, 1000, 0, time.Hour, func(pruneResult) { cancel() })
	if !errors.Is(err, context.Canceled) || res.deleted != 1000 || s.left != 4000 {
		t.Fatalf("interrupted: %+v, %v, left %d", res, err, s.left)
	}
	s = &fakePruneStore{left: 5000, fail: errors.New("boom")}
	if res, err := prunePass(ctx, s, 1000, 0, 0, func(pruneResult) {}); err == nil || res.deleted != 0 {
		t.Fatalf("failing store: %+v, %v", res, err)
	}
}

type fakePruneStore struct {
	left  int
	asked []int
	fail  error
}

func (s *fakePruneStore) Prune(ctx context.Context, limit int) (int, error) {
	if s.fail != nil {
		return 0, s.fail
	}
	s.asked = append(s.asked, limit)
	n := min(limit, s.left)
	s.left -= n
	return n, nil
}

func TestConfirm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for in, want := range map[string]bool{"y\n": true, "YES\n": true, " y \n": true, "n\n": false, "\n": false, "": false, "yep\n": false} {
		got, err := confirm(ctx, strings.NewReader(in), io.Discard, "? ")
		if err != nil || got != want {
			t.Errorf("confirm(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r, w := io.Pipe()
	defer w.Close()
	if ok, err := confirm(cctx, r, io.Discard, "? "); ok || err == nil {
		t.Fatalf("interrupted confirm: %v, %v", ok, err)
	}
}

func TestFormatAge(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		42 * time.Second: "42s", 245 * time.Second: "4m05s", 3*time.Hour + 12*time.Minute: "3h12m",
		51 * time.Hour: "2d03h", -5 * time.Second: "-5s", 1499 * time.Millisecond: "1s",
	} {
		if got := formatAge(d); got != want {
			t.Errorf("formatAge(%s) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{time.Minute: "1m", 90 * time.Minute: "1h30m", time.Hour: "1h",
		100 * time.Millisecond: "100ms", 0: "0s", 61 * time.Second: "1m1s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestEveryCommandHasHelpWithExample(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"}, {"help", "stuck"}, {"help", "release"}, {"help", "migrate", "up"},
		{"migrate", "--help"}, {"migrate", "-h"}, {"migrate", "up", "--help"}, {"migrate", "status", "--help"}, {"migrate", "print", "-h"},
		{"stuck", "--help"}, {"release", "--help"}, {"prune", "--help"}, {"prune", "-h"},
		{"reconcile", "--help"}, {"report", "--help"}, {"resolve", "--help"}, {"design", "--help"},
		{"completion", "--help"}, {"help", "--help"},
		// --help wins over everything else on the line
		{"stuck", "--limit", "0", "--help"}, {"release", "--help", "usr_1"},
	} {
		out, code := run(t, []string{"DATABASE_URL="}, args...)
		if code != 0 || !strings.Contains(out, "Example") {
			t.Errorf("payonce %s: exit %d, want 0 and an example:\n%s", strings.Join(args, " "), code, out)
		}
	}
}

func TestMissingDatabaseIsAClearUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"stuck"}, {"release", "usr_1", "usr_1_charge_x", "--yes"}, {"prune"}} {
		out, code := run(t, []string{"DATABASE_URL="}, args...)
		if code != 2 || !strings.Contains(out, "no database: set DATABASE_URL or pass --database-url") {
			t.Errorf("payonce %s without a database: exit %d:\n%s", strings.Join(args, " "), code, out)
		}
	}
	// A database without payonce's schema is named, with the fix.
	url := pgtest.SchemaURL(t)
	out, code := run(t, nil, "stuck", "--database-url", url)
	if code != 1 || !strings.Contains(out, "no table idempotency_store") || !strings.Contains(out, "payonce migrate up") {
		t.Fatalf("stuck on an empty schema: exit %d:\n%s", code, out)
	}
}

func TestOpsUsageErrors(t *testing.T) {
	t.Parallel()
	env := []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stuck", "--limit", "0"}, "--limit must be between 1 and 10000"},
		{[]string{"stuck", "--older-than", "-1s"}, "--older-than must not be negative"},
		{[]string{"stuck", "--format", "csv"}, "--format must be table or json"},
		{[]string{"stuck", "--nope"}, "stuck: unknown flag: --nope"},
		{[]string{"stuck", "--limit", "many"}, `invalid argument "many" for "--limit" flag`},
		{[]string{"stuck", "extra"}, `unexpected argument "extra"`},
		{[]string{"release", "usr_1"}, "release needs <scope> <key>, got 1 argument(s)"},
		{[]string{"release", "usr_1", "usr_1 charge"}, "key"},
		{[]string{"release", "", "usr_1_charge_x"}, "scope"},
		{[]string{"prune", "--batch", "0"}, "--batch must be between 1 and 50000"},
		{[]string{"prune", "--limit", "-1"}, "--limit must not be negative"},
		{[]string{"help", "nope"}, `no help for "nope"`},
	} {
		out, code := run(t, env, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("payonce %q: exit %d, want 2 and %q:\n%s", tc.args, code, tc.want, out)
		}
	}
}

// A service on the core alone (payonce migrate up --line idempotency, no
// payments tables) lists and releases its stuck records: the intent
// column stays empty.
func TestStuckAndReleaseOnCoreOnlySchema(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	pool := pgtest.PoolURL(t, url)
	ctx := context.Background()
	if _, err := migrations.MigrateLines(ctx, pool, migrations.LineIdempotency); err != nil {
		t.Fatal(err)
	}
	var payable bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('payment_intents') IS NOT NULL`).Scan(&payable); err != nil || payable {
		t.Fatalf("payment_intents on a core-only schema: %v %v", payable, err)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := opsBundle{url: url, pool: pool, store: store}
	const scope, key = "usr_core", "usr_core_createOrder_9f8e7d6c"
	b.plantStuck(t, scope, key)

	out, code := run(t, nil, "stuck", "--older-than", "100ms", "--database-url", url)
	if code != 0 || !strings.Contains(out, idempotency.ShortHash(key)) {
		t.Fatalf("stuck on a core-only schema: exit %d, want the record listed:\n%s", code, out)
	}
	out, code = run(t, []string{"USER=alice"}, "release", scope, key, "--yes", "--reason", "INC-7", "--database-url", url)
	if code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("release on a core-only schema: exit %d:\n%s", code, out)
	}
	if n := b.auditRows(t); n != 1 {
		t.Fatalf("%d audit rows, want 1", n)
	}
}
