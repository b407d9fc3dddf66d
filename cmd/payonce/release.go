package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
)

const releaseUsage = `Usage: payonce release <scope> <key> [--yes] [--force] [--reason TEXT] [--database-url URL]

Releases the lease of one idempotency record stuck PROCESSING, as its holder
would release it: the lease ends now (an ended lease stays as it is), the
record stays PROCESSING with its fingerprint, and the next retry of the key
reclaims it under a new lock version and re-drives the action. A payment is
re-driven with the same provider references, which the provider
deduplicates only while it remembers them: Stripe forgets a key after 24
hours, PayPal an order's request id after 6 hours, and then takes it for a
NEW request. So past the provider's window (less payments.Config's
WindowMargin, 1 hour by default) payments never re-sends them: the retry
looks the attempt up at the provider and settles it from what it finds, or
flags it NEEDS_REVIEW with the reason. Nothing else changes.

<key> is the full stored key, as payonce stuck --show-keys prints it.

release shows the record first, then asks for confirmation (y/N) when stdin
is a terminal; otherwise it needs --yes, and refuses without it. The release
and its row in operator_audit (who, when, the key's SHA-256, what was seen,
why) commit in one transaction.

It is fenced like the store's own release: it applies only while the record
is PROCESSING under the lock version it showed, so a holder that completes
the record, or a retry that reclaims it, in the meantime is never
overwritten: then nothing changes (exit 3).

It refuses a record that is not PROCESSING (it has no lease), and one whose
lease is still live unless --force. Releasing a live lease makes two
holders: the first may still be executing when a retry reclaims the record.
Fencing keeps the outcome single (once the record is reclaimed, the first
holder can no longer complete it), but the side effect itself may run twice
unless it is idempotent downstream (payments are: same provider references).
Use --force only when the holder is known to be gone (its process killed,
its host down) and its lease is too long to wait for.

Flags:
  --yes             release without asking (required when stdin is not a terminal)
  --force           release a lease that is still live (see above)
  --reason TEXT     why, kept in the audit row (a ticket number, ...)
  --database-url U  PostgreSQL URL (default $DATABASE_URL)

Exit codes: 0 released; 1 failure (no such record, database error, not
confirmed); 2 usage error, including a missing --yes when stdin is not a
terminal; 3 refused: the record is not PROCESSING, its lease is live
(without --force), or it changed after it was shown. Only 0 changes anything.

Examples:
  payonce stuck --show-keys
  payonce release usr_7fQ9x usr_7fQ9x_createOrder_0b7e2c1e-2d4b-4c43-9a51-7cc2e1f0a9d4
  payonce release usr_7fQ9x usr_7fQ9x_charge_order42 --yes --reason INC-1234
`

// exitRefused is release's exit code when the record's state forbids the
// release: nothing changed.
const exitRefused = 3

// releaseReadSQL reads what release shows and decides on, with the
// database clock beside the record's times.
const releaseReadSQL = `SELECT s.status, s.lock_version, s.created_at, s.locked_until, now(),
       i.provider, i.status, i.attempt
  FROM idempotency_store s
  LEFT JOIN payment_intents i ON i.idempotency_key = s.idempotency_key AND i.user_id = s.user_id
 WHERE s.idempotency_key = $1 AND s.user_id = $2`

// operatorReleaseSQL is pgstore's release fenced by the lock version that
// was shown ($3): it matches nothing once the holder completed, failed or
// abandoned the record or a retry reclaimed it. Unless forced ($4) it also
// matches nothing while the lease is live, in case the holder extended it
// (heartbeat) since it was shown. LEAST keeps an ended lease's end, so
// payonce stuck still tells how long the record has waited.
const operatorReleaseSQL = `UPDATE idempotency_store
   SET locked_until = LEAST(locked_until, now())
 WHERE idempotency_key = $1 AND user_id = $2
   AND status = 'PROCESSING' AND lock_version = $3
   AND ($4 OR locked_until IS NULL OR locked_until <= now())
RETURNING locked_until`

const insertAuditSQL = `INSERT INTO operator_audit (actor, command, scope, key_sha256, detail)
VALUES ($1, $2, $3, $4, $5)
RETURNING id`

// releaseTarget is the record release shows and fences on.
type releaseTarget struct {
	scope, key  string
	status      string
	version     int64
	createdAt   time.Time
	lockedUntil *time.Time
	dbNow       time.Time
	intent      *stuckIntent
}

func (r releaseTarget) live() bool { return r.lockedUntil != nil && r.lockedUntil.After(r.dbNow) }

func runRelease(args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	yes := fs.Bool("yes", false, "")
	force := fs.Bool("force", false, "")
	reason := fs.String("reason", "", "")
	pos, err := parseFlags(fs, releaseUsage, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError{fmt.Sprintf("release needs <scope> <key>, got %d argument(s) (see payonce release --help)", len(pos))}
	}
	scope, key := pos[0], pos[1]
	if err := idempotency.ValidateScope(scope); err != nil {
		return usageError{"release: " + err.Error()}
	}
	if err := idempotency.ValidateKey(key); err != nil {
		return usageError{"release: " + err.Error()}
	}
	ctx, stop := signalContext()
	defer stop()
	pool, err := openPool(ctx, *dbURL, "release", "idempotency_store", "payment_intents", "operator_audit")
	if err != nil {
		return err
	}
	defer pool.Close()

	t, err := readReleaseTarget(ctx, pool, scope, key)
	if errors.Is(err, pgx.ErrNoRows) {
		hint := ""
		if len(key) == 12 && isLowerHex(key) {
			hint = " (it looks like a key hash: release takes the full key)"
		}
		return fmt.Errorf("release: scope %q has no record with key %s%s; payonce stuck --show-keys lists full keys",
			scope, idempotency.ShortHash(key), hint)
	}
	if err != nil {
		return err
	}
	printReleaseTarget(os.Stdout, t)
	switch {
	case t.status != string(idempotency.StatusProcessing):
		return exitError{exitRefused, fmt.Errorf("release refused: the record is %s, it has no lease to release; nothing changed", t.status)}
	case t.live() && !*force:
		return exitError{exitRefused, fmt.Errorf("release refused: the lease is live for another %s, its holder may still be executing; "+
			"wait for it, or pass --force if the holder is gone (see payonce release --help); nothing changed",
			formatAge(t.lockedUntil.Sub(t.dbNow)))}
	}
	if !*yes {
		if !isTerminal(os.Stdin) {
			return usageError{"release: stdin is not a terminal and --yes is not given; nothing changed"}
		}
		ok, err := confirm(ctx, os.Stdin, os.Stdout, "Release this lease? [y/N] ")
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("release: not confirmed; nothing changed")
		}
	}
	id, err := releaseRecord(ctx, pool, t, *force, *reason)
	if err != nil {
		return err
	}
	if t.live() {
		fmt.Printf("released: scope %s, key hash %s, lock version %d: the lease ended now (audit id %d).\n"+
			"The next retry of the key reclaims the record; from then on the first holder cannot complete it.\n",
			scope, idempotency.ShortHash(key), t.version, id)
	} else {
		fmt.Printf("released: scope %s, key hash %s, lock version %d: the lease had already ended, the record is\n"+
			"unchanged and the release is recorded (audit id %d). The next retry of the key reclaims the record.\n",
			scope, idempotency.ShortHash(key), t.version, id)
	}
	return nil
}

func readReleaseTarget(ctx context.Context, pool *pgxpool.Pool, scope, key string) (releaseTarget, error) {
	t := releaseTarget{scope: scope, key: key}
	var (
		provider, status *string
		attempt          *int32
	)
	err := pool.QueryRow(ctx, releaseReadSQL, key, scope).Scan(&t.status, &t.version, &t.createdAt, &t.lockedUntil, &t.dbNow,
		&provider, &status, &attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, err
	}
	if err != nil {
		return t, fmt.Errorf("release: read the record: %w", err)
	}
	if provider != nil {
		t.intent = &stuckIntent{Provider: *provider, Status: *status, Attempt: *attempt}
	}
	return t, nil
}

func printReleaseTarget(w io.Writer, t releaseTarget) {
	action := "?"
	if a, _, ok := idempotency.SplitKey(t.scope, t.key); ok {
		action = a
	}
	lease := "none"
	switch {
	case t.live():
		lease = fmt.Sprintf("LIVE, ends in %s", formatAge(t.lockedUntil.Sub(t.dbNow)))
	case t.lockedUntil != nil:
		lease = fmt.Sprintf("ended %s ago", formatAge(t.dbNow.Sub(*t.lockedUntil)))
	}
	intent := "none"
	if t.intent != nil {
		intent = fmt.Sprintf("%s %s, attempt %d", t.intent.Provider, t.intent.Status, t.intent.Attempt)
	}
	fmt.Fprintf(w, "Record:\n  scope     %s\n  key hash  %s\n  action    %s\n  status    %s, lock version %d\n"+
		"  created   %s ago\n  lease     %s\n  intent    %s\n",
		t.scope, idempotency.ShortHash(t.key), action, t.status, t.version,
		formatAge(t.dbNow.Sub(t.createdAt)), lease, intent)
}

// confirm asks question on w and reads one answer line from r: "y" or
// "yes" (any case) is a yes; anything else, or end of input, a no.
func confirm(ctx context.Context, r io.Reader, w io.Writer, question string) (bool, error) {
	fmt.Fprint(w, question)
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		answer <- line
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(w)
		return false, fmt.Errorf("release: interrupted; nothing changed")
	case a := <-answer:
		a = strings.ToLower(strings.TrimSpace(a))
		return a == "y" || a == "yes", nil
	}
}

// releaseRecord releases t's lease, fenced by the lock version shown, and
// writes the audit row in the same transaction. It returns the audit id.
func releaseRecord(ctx context.Context, pool *pgxpool.Pool, t releaseTarget, force bool, reason string) (int64, error) {
	var id int64
	var changed bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var after *time.Time
		err := tx.QueryRow(ctx, operatorReleaseSQL, t.key, t.scope, t.version, force).Scan(&after)
		if errors.Is(err, pgx.ErrNoRows) {
			changed = true
			return nil
		}
		if err != nil {
			return err
		}
		detail := map[string]any{
			"key_hash":            idempotency.ShortHash(t.key),
			"lock_version":        t.version,
			"lease_live":          t.live(),
			"locked_until_before": t.lockedUntil,
			"locked_until_after":  after,
			"record_created_at":   t.createdAt,
			"forced":              force,
			"reason":              reason,
			"host":                hostname(),
		}
		if t.intent != nil {
			detail["intent"] = t.intent
		}
		meta, err := json.Marshal(detail)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, insertAuditSQL, actor(), "release", t.scope, keySHA256(t.key), meta).Scan(&id)
	})
	if err != nil {
		return 0, fmt.Errorf("release: %w; nothing changed", err)
	}
	if changed {
		now, err := readReleaseTarget(ctx, pool, t.scope, t.key)
		what := "it no longer exists (its holder abandoned it)"
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			what = "it could not be read again: " + err.Error()
		case now.status != t.status:
			what = "it is now " + now.status
		case now.version != t.version:
			what = fmt.Sprintf("a retry reclaimed it (lock version %d)", now.version)
		case now.live():
			what = fmt.Sprintf("its holder extended the lease (live for another %s)", formatAge(now.lockedUntil.Sub(now.dbNow)))
		default:
			what = "it changed"
		}
		return 0, exitError{exitRefused, fmt.Errorf("release refused: the record changed after it was shown: %s; nothing changed", what)}
	}
	return id, nil
}

// keySHA256 is what operator_audit keeps of a key: SHA-256 in hex, whose
// first 12 characters are idempotency.ShortHash(key).
func keySHA256(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// actor names the operator for the audit: the OS user as the environment
// claims it (the audit row also keeps the database role).
func actor() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}
