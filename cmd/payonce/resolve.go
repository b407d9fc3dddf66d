package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers"
)

// resolveFlags are payonce resolve's flags.
type resolveFlags struct {
	succeeded, declined, reason, dbURL string
	failed, yes                        bool
}

func newResolveCmd() *cobra.Command {
	var o resolveFlags
	c := &cobra.Command{
		Use:   "resolve SCOPE KEY --succeeded PROVIDER_ID | --declined CODE | --failed --reason TEXT",
		Short: "settle an intent flagged NEEDS_REVIEW with your decision (audited)",
		Long: `Settles a payment intent the reconciler flagged NEEDS_REVIEW with your
decision, taken from the provider's own records (docs/runbook.md, section
4): --succeeded with the provider's id of the charge (or refund) kept,
--declined with the decline code, or --failed (nothing was charged). In one
transaction: the intent's status, the ledger entry where money moved (the
same entry payonce posts itself), the idempotency record completed so that
the client's next retry gets the decision, and an operator_audit row.
KEY is payonce's key of the intent, as payonce report and the SQL of the
runbook show it ("<scope>_charge_<client key>"). It refuses an intent that
is not NEEDS_REVIEW. Refund extra charges at the provider first.

The intent's provider must be configured as for payonce reconcile
(STRIPE_API_BASE, ADYEN_API_BASE or PAYPAL_API_BASE and their
credentials). payonce does not call it: it checks that the id given to
--succeeded has the shape of the provider's id of such an object (a
PaymentIntent's pi_... or a Refund's re_... at Stripe, a 16-character
pspReference at Adyen; PayPal's ids have no documented shape), and that
the decline code and the reason are not blank. Whether that object is the
one kept is your reading of the provider's records.

Exit codes: 0 settled; 1 failure or not confirmed; 2 usage error or a bad
decision (nothing changed; also without --yes when stdin is not a
terminal); 3 refused: the intent is not under review, or a request with
its key holds a live lease, nothing changed.`,
		Example: `  payonce resolve usr_bob usr_bob_charge_order-2002 --succeeded pi_3Qx... \
    --reason "INC-1234: kept the first charge, refunded the second" --yes`,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              func(_ *cobra.Command, args []string) error { return runResolve(args, o) },
	}
	f := c.Flags()
	f.StringVar(&o.succeeded, "succeeded", "", "it succeeded: the provider's id of the charge (or refund) kept")
	f.StringVar(&o.declined, "declined", "", "it was declined: the decline code")
	f.BoolVar(&o.failed, "failed", false, "nothing was charged")
	f.StringVar(&o.reason, "reason", "", "why (required): kept in the audit row and the intent")
	f.BoolVar(&o.yes, "yes", false, "settle without asking (required when stdin is not a terminal)")
	cli.AddDatabaseURL(c, f, &o.dbURL)
	return c
}

func runResolve(pos []string, o resolveFlags) error {
	if len(pos) != 2 {
		return cli.Usage(fmt.Sprintf("resolve needs SCOPE KEY, got %d argument(s) (see payonce resolve --help)", len(pos)))
	}
	scope, key := pos[0], pos[1]
	if err := idempotency.ValidateScope(scope); err != nil {
		return cli.Usage(fmt.Sprintf("resolve: SCOPE: %v (the intent's user_id, as payonce report shows it)", err))
	}
	for _, f := range []struct{ name, value string }{{"--succeeded", o.succeeded}, {"--declined", o.declined}, {"--reason", o.reason}} {
		if f.value != "" && strings.TrimSpace(f.value) == "" {
			return cli.Usage(fmt.Sprintf("resolve: %s is blank: give its value (see payonce resolve --help)", f.name))
		}
	}
	var proof payments.Proof
	chosen := 0
	if o.succeeded != "" {
		chosen++
		proof = payments.Proof{Status: payments.IntentSucceeded, ProviderID: o.succeeded}
	}
	if o.declined != "" {
		chosen++
		proof = payments.Proof{Status: payments.IntentDeclined, DeclineCode: o.declined}
	}
	if o.failed {
		chosen++
		proof = payments.Proof{Status: payments.IntentFailed}
	}
	switch {
	case chosen != 1:
		return cli.Usage("resolve: give exactly one of --succeeded PROVIDER_ID, --declined CODE, --failed")
	case o.reason == "":
		return cli.Usage("resolve: --reason is required (it goes in the audit and the intent)")
	}
	proof.Reason = "resolved by " + actor() + ": " + o.reason
	if !o.yes && !cli.IsTerminal(os.Stdin) {
		return cli.Usage("resolve: stdin is not a terminal and --yes is not given; nothing changed")
	}
	cfg, err := providers.FromEnv(os.Getenv)
	if err != nil {
		return cli.Usage(err.Error())
	}
	if len(cfg.ProviderNames()) == 0 {
		return cli.Usage("resolve: no provider configured: set the intent's provider as for payonce reconcile " +
			"(STRIPE_API_BASE and STRIPE_SECRET_KEY, ADYEN_API_BASE, ADYEN_API_KEY and ADYEN_MERCHANT_ACCOUNT, or PAYPAL_API_BASE, PAYPAL_CLIENT_ID and PAYPAL_SECRET); nothing changed")
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	pool, err := openPool(ctx, o.dbURL, "resolve", "payment_intents", "operator_audit")
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := providers.NewClient(pool, cfg)
	if err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	fmt.Printf("Settle %s (scope %s) as %s", key, scope, proof.Status)
	if proof.ProviderID != "" {
		fmt.Printf(" on %s", proof.ProviderID)
	}
	fmt.Printf(": %s\n", o.reason)
	if !o.yes {
		ok, err := confirm(ctx, os.Stdin, os.Stdout, "Settle it? [y/N] ")
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("resolve: not confirmed; nothing changed")
		}
	}
	detail, _ := json.Marshal(map[string]string{"status": string(proof.Status), "provider_id": proof.ProviderID,
		"decline_code": proof.DeclineCode, "reason": o.reason, "host": hostname()})
	var auditID int64
	op := client.Operator()
	err = op.ResolveReview(ctx, scope, key, proof, func(ctx context.Context, tx pgx.Tx) error {
		if err := op.NoteReviewTx(ctx, tx, scope, key, proof.Reason); err != nil {
			return err
		}
		return tx.QueryRow(ctx, insertAuditSQL, actor(), "resolve", scope, keySHA256(key), detail).Scan(&auditID)
	})
	switch {
	case errors.Is(err, payments.ErrNotUnderReview):
		return cli.Exit(exitRefused, fmt.Errorf("resolve refused: %w; nothing changed", err))
	case errors.Is(err, idempotency.ErrInProgress):
		left := "its lease"
		if ip := (*idempotency.InProgressError)(nil); errors.As(err, &ip) {
			left = "its lease, " + ip.RetryAfter.Round(time.Second).String() + " more"
		}
		return cli.Exit(exitRefused, fmt.Errorf("resolve refused: a request with this key is in progress: wait for %s, "+
			"or release the lease (payonce release --force) if its holder is known to be gone; nothing changed", left))
	case errors.Is(err, idempotency.ErrInvalid):
		return cli.Usage(fmt.Sprintf("resolve: %v; nothing changed", err))
	case errors.Is(err, idempotency.ErrNotFound):
		return fmt.Errorf("resolve: %w", err)
	case err != nil:
		return fmt.Errorf("resolve: %w; nothing changed", err)
	}
	fmt.Printf("settled: %s is %s (audit id %d); the client's next retry with this key gets it\n", key, proof.Status, auditID)
	return nil
}
