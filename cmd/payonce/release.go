package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/payments"
)

// exitRefused is release's exit code when the record's state forbids the
// release: nothing changed.
const exitRefused = 3

const insertAuditSQL = `INSERT INTO operator_audit (actor, command, scope, key_sha256, detail)
VALUES ($1, $2, $3, $4, $5)
RETURNING id`

// releaseTarget is the record release shows and fences on, and its
// payment intent when it has one.
type releaseTarget struct {
	pgstore.LeaseState
	intent *stuckIntent
}

// releaseFlags are payonce release's flags.
type releaseFlags struct {
	yes, force    bool
	reason, dbURL string
}

func newReleaseCmd() *cobra.Command {
	var o releaseFlags
	c := &cobra.Command{
		Use:   "release <scope> <key>",
		Short: "release one stuck record's lease: confirmed, fenced by its lock version, audited",
		Long: `Releases the lease of one idempotency record stuck PROCESSING, as its holder
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

Exit codes: 0 released; 1 failure (no such record, database error, not
confirmed); 2 usage error, including a missing --yes when stdin is not a
terminal; 3 refused: the record is not PROCESSING, its lease is live
(without --force), or it changed after it was shown. Only 0 changes anything.`,
		Example: `  payonce stuck --show-keys
  payonce release usr_7fQ9x usr_7fQ9x_createOrder_0b7e2c1e-2d4b-4c43-9a51-7cc2e1f0a9d4
  payonce release usr_7fQ9x usr_7fQ9x_charge_order42 --yes --reason INC-1234`,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              func(_ *cobra.Command, args []string) error { return runRelease(args, o) },
	}
	f := c.Flags()
	f.BoolVar(&o.yes, "yes", false, "release without asking (required when stdin is not a terminal)")
	f.BoolVar(&o.force, "force", false, "release a lease that is still live (see above)")
	f.StringVar(&o.reason, "reason", "", "why, kept in the audit row (a ticket number, ...)")
	cli.AddDatabaseURL(c, f, &o.dbURL)
	return c
}

func runRelease(pos []string, o releaseFlags) error {
	if len(pos) != 2 {
		return cli.Usage(fmt.Sprintf("release needs <scope> <key>, got %d argument(s) (see payonce release --help)", len(pos)))
	}
	scope, key := pos[0], pos[1]
	if err := idempotency.ValidateScope(scope); err != nil {
		return cli.Usage("release: " + err.Error())
	}
	if err := idempotency.ValidateKey(key); err != nil {
		return cli.Usage("release: " + err.Error())
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	pool, err := openPool(ctx, o.dbURL, "release", "idempotency_store", "operator_audit")
	if err != nil {
		return err
	}
	defer pool.Close()

	t, err := readReleaseTarget(ctx, pool, scope, key)
	if errors.Is(err, idempotency.ErrNotFound) {
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
	case t.Status != idempotency.StatusProcessing:
		return cli.Exit(exitRefused, fmt.Errorf("release refused: the record is %s, it has no lease to release; nothing changed", t.Status))
	case t.Live() && !o.force:
		return cli.Exit(exitRefused, fmt.Errorf("release refused: the lease is live for another %s, its holder may still be executing; "+
			"wait for it, or pass --force if the holder is gone (see payonce release --help); nothing changed",
			formatAge(t.LockedUntil.Sub(t.DatabaseNow))))
	}
	if !o.yes {
		if !cli.IsTerminal(os.Stdin) {
			return cli.Usage("release: stdin is not a terminal and --yes is not given; nothing changed")
		}
		ok, err := confirm(ctx, os.Stdin, os.Stdout, "Release this lease? [y/N] ")
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("release: not confirmed; nothing changed")
		}
	}
	id, err := releaseRecord(ctx, pool, t, o.force, o.reason)
	if err != nil {
		return err
	}
	if t.Live() {
		fmt.Printf("released: scope %s, key hash %s, lock version %d: the lease ended now (audit id %d).\n"+
			"The next retry of the key reclaims the record; from then on the first holder cannot complete it.\n",
			scope, idempotency.ShortHash(key), t.LockVersion, id)
	} else {
		fmt.Printf("released: scope %s, key hash %s, lock version %d: the lease had already ended, the record is\n"+
			"unchanged and the release is recorded (audit id %d). The next retry of the key reclaims the record.\n",
			scope, idempotency.ShortHash(key), t.LockVersion, id)
	}
	return nil
}

// readReleaseTarget reads the record (scope, key) and its intent.
// Errors: idempotency.ErrNotFound, as it is; others wrapped.
func readReleaseTarget(ctx context.Context, pool *pgxpool.Pool, scope, key string) (releaseTarget, error) {
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return releaseTarget{}, err
	}
	l, err := store.Lease(ctx, scope, key)
	if errors.Is(err, idempotency.ErrNotFound) {
		return releaseTarget{LeaseState: l}, err
	}
	if err != nil {
		return releaseTarget{LeaseState: l}, fmt.Errorf("release: read the record: %w", err)
	}
	ref := payments.IntentRef{Scope: scope, Key: key}
	intents, err := intentSummaries(ctx, pool, ref)
	if err != nil {
		return releaseTarget{LeaseState: l}, fmt.Errorf("release: read the record: %w", err)
	}
	return releaseTarget{LeaseState: l, intent: stuckIntentOf(intents, ref)}, nil
}

func printReleaseTarget(w io.Writer, t releaseTarget) {
	action := "?"
	if a, _, ok := idempotency.SplitKey(t.Scope, t.Key); ok {
		action = a
	}
	lease := "none"
	switch {
	case t.Live():
		lease = fmt.Sprintf("LIVE, ends in %s", formatAge(t.LockedUntil.Sub(t.DatabaseNow)))
	case t.LockedUntil != nil:
		lease = fmt.Sprintf("ended %s ago", formatAge(t.DatabaseNow.Sub(*t.LockedUntil)))
	}
	intent := "none"
	if t.intent != nil {
		intent = fmt.Sprintf("%s %s, attempt %d", t.intent.Provider, t.intent.Status, t.intent.Attempt)
	}
	fmt.Fprintf(w, "Record:\n  scope     %s\n  key hash  %s\n  action    %s\n  status    %s, lock version %d\n"+
		"  created   %s ago\n  lease     %s\n  intent    %s\n",
		t.Scope, idempotency.ShortHash(t.Key), action, t.Status, t.LockVersion,
		formatAge(t.DatabaseNow.Sub(t.CreatedAt)), lease, intent)
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
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return 0, err
	}
	var id int64
	_, err = store.ReleaseStuck(ctx, pgstore.ReleaseStuckParams{Scope: t.Scope, Key: t.Key, LockVersion: t.LockVersion, Force: force},
		func(ctx context.Context, tx pgx.Tx, res pgstore.ReleaseStuckResult) error {
			detail := map[string]any{
				"key_hash":            idempotency.ShortHash(t.Key),
				"lock_version":        t.LockVersion,
				"lease_live":          t.Live(),
				"locked_until_before": t.LockedUntil,
				"locked_until_after":  res.LockedUntil,
				"record_created_at":   t.CreatedAt,
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
			return tx.QueryRow(ctx, insertAuditSQL, actor(), "release", t.Scope, keySHA256(t.Key), meta).Scan(&id)
		})
	switch {
	case errors.Is(err, idempotency.ErrLeaseLost):
		now, err := readReleaseTarget(ctx, pool, t.Scope, t.Key)
		what := "it no longer exists (its holder abandoned it)"
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
		case err != nil:
			what = "it could not be read again: " + err.Error()
		case now.Status != t.Status:
			what = "it is now " + string(now.Status)
		case now.LockVersion != t.LockVersion:
			what = fmt.Sprintf("a retry reclaimed it (lock version %d)", now.LockVersion)
		case now.Live():
			what = fmt.Sprintf("its holder extended the lease (live for another %s)", formatAge(now.LockedUntil.Sub(now.DatabaseNow)))
		default:
			what = "it changed"
		}
		return 0, cli.Exit(exitRefused, fmt.Errorf("release refused: the record changed after it was shown: %s; nothing changed", what))
	case err != nil:
		return 0, fmt.Errorf("release: %w; nothing changed", err)
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
