package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/cronslot"
	"github.com/payonce/payonce/idempotency/inbox"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/saga"
)

// plantSQL leaves what the runbook's sections work on and that only the
// database holds: records stuck PROCESSING (section 1: one whose holder
// crashed 20 minutes ago, one whose lease is live), expired records for
// the pruner (section 3: 300 written under ExpiredIsNew, 20 under
// ExpiredRefused that become tombstones, 10 tombstones past their
// horizon), and a flooding scope next to ordinary ones (section 5).
const plantSQL = `
INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, created_at, expires_at)
VALUES ('usr_7fQ9x_createOrder_0b7e2c1e-2d4b-4c43-9a51-7cc2e1f0a9d4', 'usr_7fQ9x', repeat('a', 64), 'PROCESSING', 41,
        now() - interval '20 minutes', now() - interval '21 minutes', now() + interval '1 day'),
       ('usr_7fQ9x_createOrder_5d1f0a7e-8c2b-4e19-b6a3-2f9e4c7d1a05', 'usr_7fQ9x', repeat('b', 64), 'PROCESSING', 7,
        now() + interval '25 minutes', now() - interval '10 minutes', now() + interval '1 day');

INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, response_code, lock_version, created_at, completed_at, expires_at)
SELECT 'usr_old' || (g % 30) || '_createOrder_' || g, 'usr_old' || (g % 30), repeat('c', 64), 'COMPLETED', 201, 1,
       now() - interval '25 hours', now() - interval '25 hours', now() - interval '1 hour'
  FROM generate_series(1, 300) g;

INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, response_code, response_raw, lock_version,
                               created_at, completed_at, expires_at, refuse_for, refuse_until)
SELECT 'usr_strict_createOrder_' || g, 'usr_strict', repeat('f', 64), 'COMPLETED',
       CASE WHEN g <= 20 THEN 201 END, CASE WHEN g <= 20 THEN convert_to('{"order_id":"o_' || g || '"}', 'UTF8') END, 1,
       now() - interval '25 hours' - (g / 21) * interval '30 days', now() - interval '25 hours' - (g / 21) * interval '30 days',
       now() - interval '1 hour' - (g / 21) * interval '30 days', interval '30 days',
       CASE WHEN g > 20 THEN now() - interval '1 hour' END
  FROM generate_series(1, 30) g;

INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, response_code, lock_version, created_at, completed_at, expires_at)
SELECT 'usr_mallory_createOrder_' || md5(g::text), 'usr_mallory', repeat('d', 64), 'COMPLETED', 201, 1,
       now() - g * interval '1 second', now() - g * interval '1 second', now() + interval '1 day'
  FROM generate_series(1, 600) g;

INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, response_code, lock_version, created_at, completed_at, expires_at)
SELECT 'usr_' || u || '_createOrder_' || md5(u || '/' || g), 'usr_' || u, repeat('e', 64), 'COMPLETED', 201, 1,
       now() - g * interval '30 seconds', now() - g * interval '30 seconds', now() + interval '1 day'
  FROM unnest(ARRAY['dave', 'erin', 'frank', 'grace']) u, generate_series(1, 12) g;

INSERT INTO idempotency_rate_limits (user_id, window_start, keys_created)
SELECT 'usr_mallory', date_bin('1 minute', now(), timestamptz 'epoch') - m * interval '1 minute', 60
  FROM generate_series(0, 9) m
UNION ALL
SELECT 'usr_dave', date_bin('1 minute', now(), timestamptz 'epoch'), 3;
`

// backdateSQL moves the open payments 10 minutes into the past, past the
// reconciler's grace period, as if their clients had given up then.
const backdateSQL = `
UPDATE payment_intents SET created_at = created_at - interval '10 minutes', updated_at = updated_at - interval '10 minutes'
 WHERE user_id IN ('usr_alice', 'usr_bob');
UPDATE idempotency_store SET created_at = created_at - interval '10 minutes', locked_until = locked_until - interval '10 minutes'
 WHERE user_id IN ('usr_alice', 'usr_bob');
`

// loseResponses delivers each request to the provider and loses its
// answer, as a connection reset after the provider committed does.
type loseResponses struct{}

func (loseResponses) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errors.New("runbookcheck: connection reset after the provider answered")
}

// plant leaves every situation the runbook's commands act on, through
// payonce's own code where payonce would have written it.
func plant(ctx context.Context, pool *pgxpool.Pool, stripeURL string) error {
	if _, err := pool.Exec(ctx, plantSQL); err != nil {
		return fmt.Errorf("plant records: %w", err)
	}
	cfg := providers.Config{Stripe: providers.StripeConfig{APIBase: stripeURL, SecretKey: stripeSecret}}
	ok, err := providers.NewClient(pool, cfg)
	if err != nil {
		return err
	}
	cfg.HTTPClient = &http.Client{Transport: loseResponses{}, Timeout: 10 * time.Second}
	lossy, err := providers.NewClient(pool, cfg)
	if err != nil {
		return err
	}
	charge := func(c *payments.Client, scope, key, amount string) error {
		_, err := c.Charge(ctx, payments.ChargeParams{Scope: scope, Key: key, Provider: "stripe",
			Amount: money.MustParse(amount, money.EUR), Recipient: "acct_shop", PaymentMethod: "pm_card_visa"})
		return err
	}
	// Sections 2 and 4: two charges whose answers were lost after Stripe
	// charged. For usr_bob, a second processor charged the same key under
	// another attempt's reference as well: two PaymentIntents for one key.
	for _, c := range []struct{ scope, key, amount string }{{"usr_alice", "order-1001", "49.99"}, {"usr_bob", "order-2002", "25.00"}} {
		if err := charge(lossy, c.scope, c.key, c.amount); !payments.OutcomeUnknown(err) {
			return fmt.Errorf("plant: the charge %s of %s should have an unknown outcome, got %v", c.key, c.scope, err)
		}
	}
	prov, err := paystripe.New(&paystripe.Config{SecretKey: stripeSecret, BaseURL: stripeURL})
	if err != nil {
		return err
	}
	bobKey := "usr_bob_charge_order-2002"
	res, err := prov.Charge(ctx, provider.ChargeRequest{Key: bobKey, ProviderKey: provider.DeriveKey(bobKey, "charge", 1, 255),
		Amount: money.MustParse("25.00", money.EUR), Recipient: "acct_shop", PaymentMethod: "pm_card_visa"})
	if err != nil || res.Status != provider.ChargeSucceeded {
		return fmt.Errorf("plant: the second charge of %s: %v (%s)", bobKey, err, res.Status)
	}
	// Section 2: one purchase charged under two keys by a client that made
	// a new key for its retry.
	for _, key := range []string{"order-3003", "order-3003-retry"} {
		if err := charge(ok, "usr_carol", key, "15.00"); err != nil {
			return fmt.Errorf("plant: charge %s of usr_carol: %w", key, err)
		}
	}
	if _, err := pool.Exec(ctx, backdateSQL); err != nil {
		return fmt.Errorf("plant: backdate: %w", err)
	}
	if err := plantMessages(ctx, pool); err != nil {
		return err
	}
	if err := plantSlots(ctx, pool); err != nil {
		return err
	}
	return plantSagas(ctx, pool)
}

// plantMessages leaves section 7's inbox records, through package inbox: a
// message of the source "orders" that failed for good (an unknown sku),
// and one that was processed.
func plantMessages(ctx context.Context, pool *pgxpool.Pool) error {
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	in, err := inbox.New(store, nil)
	if err != nil {
		return err
	}
	msg := func(id, sku string) inbox.Message {
		fp, err := idempotency.NewFingerprint().String("sku", sku).Sum()
		if err != nil {
			panic(err)
		}
		return inbox.Message{Source: "orders", ID: id, Fingerprint: fp, Attempt: 1}
	}
	out, err := in.HandleTx(ctx, msg("ord-1001", "book-99"), func(context.Context, pgx.Tx, inbox.Message) error {
		return idempotency.Permanent(errors.New("unknown sku"), idempotency.Response{Code: 422, Body: []byte("unknown sku book-99")})
	})
	if out != inbox.Poison {
		return fmt.Errorf("plant: the poison message: %v %v", out, err)
	}
	if out, err := in.HandleTx(ctx, msg("ord-1002", "book-42"), func(context.Context, pgx.Tx, inbox.Message) error { return nil }); out != inbox.Processed {
		return fmt.Errorf("plant: the processed message: %v %v", out, err)
	}
	return nil
}

// sagaName is the definition of the planted sagas. The checkout service
// that runbookcheck runs recovers its own definition only: these sagas
// stay as planted.
const sagaName = "order"

// plantSagas leaves section 6's sagas, run by package saga itself: one
// completed (usr_heidi), one whose charge's outcome is unknown (usr_ivan,
// RUNNING), one rolled back after a decline (usr_judy), one whose refund
// was refused for good (usr_ken, NEEDS_REVIEW), and one whose refund keeps
// failing (usr_lena, COMPENSATING). Their steps are simulated: no payment
// is made, so that sections 1 to 5 see no more intents. The two left open
// are then backdated, as if nothing had driven them for 20 and 40 minutes.
func plantSagas(ctx context.Context, pool *pgxpool.Pool) error {
	orch, err := saga.New(pool, &saga.Config{CompensationAttempts: 2, CompensationBackoff: 10 * time.Millisecond})
	if err != nil {
		return err
	}
	// What each saga's steps do, by saga key.
	declined := map[string]bool{"order-5003": true}
	unknown := map[string]bool{"order-5001": true}
	shipRefused := map[string]bool{"order-5004": true, "order-5005": true}
	refund := map[string]error{
		"order-5004": saga.Fail(errors.New("refund refused: the charge is disputed")),
		"order-5005": errors.New("refund: provider unavailable (503)"),
	}
	err = orch.Register(saga.Definition{Name: sagaName, Steps: []saga.Step{
		{Name: "reserve", Kind: saga.Local,
			Action: func(ctx context.Context, c *saga.Call) (any, error) {
				return map[string]any{"sku": "sku-42", "held": 1}, nil
			},
			Compensate: func(ctx context.Context, c *saga.Call) error { return nil }},
		{Name: "charge", Kind: saga.Remote,
			Action: func(ctx context.Context, c *saga.Call) (any, error) {
				switch {
				case unknown[c.SagaKey]:
					return nil, saga.Unknown(errors.New("charge: no answer within 30s"))
				case declined[c.SagaKey]:
					return nil, saga.Fail(errors.New("card declined: insufficient_funds"))
				}
				return map[string]string{"charge": "ch_" + c.SagaKey}, nil
			},
			Compensate: func(ctx context.Context, c *saga.Call) error { return refund[c.SagaKey] }},
		{Name: "ship", Kind: saga.Local,
			Action: func(ctx context.Context, c *saga.Call) (any, error) {
				if shipRefused[c.SagaKey] {
					return nil, saga.Fail(errors.New("carrier refused the address"))
				}
				return map[string]int{"shipment": 77}, nil
			}},
	}})
	if err != nil {
		return err
	}
	for _, p := range []struct {
		scope, key string
		want       error // nil: completed
	}{
		{"usr_heidi", "order-5000", nil},
		{"usr_ivan", "order-5001", saga.ErrPending},
		{"usr_judy", "order-5003", saga.ErrRolledBack},
		{"usr_ken", "order-5004", saga.ErrNeedsReview},
		{"usr_lena", "order-5005", saga.ErrPending},
	} {
		_, err := orch.Run(ctx, saga.RunParams{Saga: sagaName, Scope: p.scope, Key: p.key,
			Input: map[string]any{"sku": "sku-42", "amount": "19.90", "currency": "EUR"}})
		if (p.want == nil && err != nil) || (p.want != nil && !errors.Is(err, p.want)) {
			return fmt.Errorf("plant: saga %s of %s: want %v, got %v", p.key, p.scope, p.want, err)
		}
	}
	if _, err := pool.Exec(ctx, backdateSagasSQL); err != nil {
		return fmt.Errorf("plant: backdate sagas: %w", err)
	}
	return nil
}

// backdateSagasSQL moves the open sagas' last progress back (their
// records' leases ended when they were left).
const backdateSagasSQL = `
UPDATE sagas SET created_at = created_at - interval '25 minutes', updated_at = updated_at - interval '20 minutes'
 WHERE scope = 'usr_ivan';
UPDATE saga_steps SET started_at = started_at - interval '20 minutes', finished_at = finished_at - interval '20 minutes',
       updated_at = updated_at - interval '20 minutes'
 WHERE scope = 'usr_ivan';
UPDATE sagas SET created_at = created_at - interval '45 minutes', updated_at = updated_at - interval '40 minutes'
 WHERE scope = 'usr_lena';
UPDATE saga_steps SET started_at = started_at - interval '40 minutes', finished_at = finished_at - interval '40 minutes',
       updated_at = updated_at - interval '40 minutes'
 WHERE scope = 'usr_lena';
`

// plantSlots leaves section 8's cron slots, through package cronslot: the
// nightly payouts of 1 December completed, those of 2 December failed for
// good.
func plantSlots(ctx context.Context, pool *pgxpool.Pool) error {
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	g, err := cronslot.New(store, nil)
	if err != nil {
		return err
	}
	for day, jobErr := range map[int]error{1: nil, 2: idempotency.Permanent(errors.New("no bank calendar for the day"), idempotency.Response{})} {
		slot := time.Date(2026, 12, day, 2, 0, 0, 0, time.UTC)
		if _, err := g.RunSlot(ctx, "nightly-payouts", slot, func(context.Context, cronslot.Slot) error { return jobErr }, nil); (err != nil) != (jobErr != nil) {
			return fmt.Errorf("plant: cron slot %s: %v", slot, err)
		}
	}
	return nil
}
