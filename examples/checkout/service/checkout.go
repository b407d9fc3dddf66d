package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/saga"
)

// SagaName is the name of the checkout saga's definition.
const SagaName = "checkout"

// The checkout saga's steps, in order.
const (
	StepReserve = "reserve" // local: take the items out of stock
	StepCharge  = "charge"  // remote: charge the customer (payments.Charge)
	StepConfirm = "confirm" // local: record the order
)

// Order is the checkout saga's input: the request's fields, validated and
// in canonical form (the amount as money.Money prints it, the currency's
// ISO code). The saga's key is bound to all of them.
type Order struct {
	SKU           string `json:"sku"`
	Qty           int    `json:"qty"`
	Amount        string `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Provider      string `json:"provider"`
	Recipient     string `json:"recipient"`
}

func (o Order) money() (money.Money, error) {
	cur, err := money.ParseCurrency(o.Currency)
	if err != nil {
		return money.Money{}, err
	}
	return money.Parse(o.Amount, cur)
}

// charged is the charge step's output, read by the confirm step.
type charged struct {
	Provider   string `json:"provider"`
	ProviderID string `json:"provider_id"`
	Amount     string `json:"amount"`
	Currency   string `json:"currency"`
}

// schemaDDL creates the example's own tables. They belong to this example,
// not to payonce's migrations: a service keeps its domain tables in its own
// schema management. Run at Open under an advisory lock (scoped to the
// current schema, as payonce's migrator does), so that instances starting
// together do not race on CREATE TABLE.
//
// inventory.stock is what is left to sell: a reservation takes its items
// out with a conditional UPDATE (never below zero: the CHECK is a second
// guard), a release puts them back.
const schemaDDL = `
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.payonce_checkout_example'));
CREATE TABLE IF NOT EXISTS inventory (
    sku         TEXT         PRIMARY KEY,
    stock       INT          NOT NULL CHECK (stock >= 0),
    updated_at  TIMESTAMPTZ  NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS reservations (
    user_id          TEXT         NOT NULL,
    -- the reserve step's sub-key, "<checkout key>_reserve"
    reservation_key  TEXT         NOT NULL,
    sku              TEXT         NOT NULL REFERENCES inventory (sku),
    qty              INT          NOT NULL CHECK (qty > 0),
    status           TEXT         NOT NULL DEFAULT 'HELD' CHECK (status IN ('HELD', 'CONFIRMED', 'RELEASED')),
    created_at       TIMESTAMPTZ  NOT NULL DEFAULT now(),
    released_at      TIMESTAMPTZ,
    PRIMARY KEY (user_id, reservation_key)
);
CREATE TABLE IF NOT EXISTS orders (
    id           BIGINT       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      TEXT         NOT NULL,
    -- the checkout's Idempotency-Key
    order_key    TEXT         NOT NULL,
    sku          TEXT         NOT NULL,
    qty          INT          NOT NULL CHECK (qty > 0),
    amount       NUMERIC      NOT NULL,
    currency     TEXT         NOT NULL,
    provider     TEXT         NOT NULL,
    provider_id  TEXT         NOT NULL,
    created_at   TIMESTAMPTZ  NOT NULL DEFAULT now(),
    UNIQUE (user_id, order_key)
);`

// schemaCheck reads every column the checkout uses: it fails when a table
// of the same name but another shape was there before (examples/orders
// has an orders table too).
const schemaCheck = `SELECT
    (SELECT count(*) FROM inventory WHERE sku = '' AND stock < 0)
  + (SELECT count(*) FROM reservations WHERE user_id = '' AND reservation_key = '' AND sku = '' AND qty < 0 AND status = '')
  + (SELECT count(*) FROM orders WHERE user_id = '' AND order_key = '' AND sku = '' AND qty < 0 AND amount < 0
       AND currency = '' AND provider = '' AND provider_id = '')`

func createSchema(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, schemaDDL)
		return err
	})
	if err != nil {
		return fmt.Errorf("checkout: create tables: %w", err)
	}
	var n int
	if err := pool.QueryRow(ctx, schemaCheck).Scan(&n); err != nil {
		return fmt.Errorf("checkout: tables inventory, reservations and orders exist with another shape "+
			"(another example on this database?): %w", err)
	}
	return nil
}

const (
	// takeStockSQL takes a reservation's items, only if that many are
	// left: concurrent checkouts of the last item wait on the row's lock
	// and see the stock the winner left. reserveSQL then records the
	// reservation, in the same transaction (the reserve step's).
	takeStockSQL = `UPDATE inventory SET stock = stock - $2, updated_at = now() WHERE sku = $1 AND stock >= $2`
	reserveSQL   = `INSERT INTO reservations (user_id, reservation_key, sku, qty) VALUES ($1, $2, $3, $4)`
	// reservedSQL: the reservation commits with the step's DONE, so a
	// step run again finds none; checked all the same.
	reservedSQL = `SELECT EXISTS (SELECT 1 FROM reservations WHERE user_id = $1 AND reservation_key = $2)`
	// releaseSQL releases a held reservation once and puts its items
	// back.
	releaseSQL = `WITH released AS (
    UPDATE reservations SET status = 'RELEASED', released_at = now()
     WHERE user_id = $1 AND reservation_key = $2 AND status = 'HELD'
    RETURNING sku, qty)
UPDATE inventory i SET stock = i.stock + r.qty, updated_at = now() FROM released r WHERE i.sku = r.sku`
	orderSQL = `INSERT INTO orders (user_id, order_key, sku, qty, amount, currency, provider, provider_id)
VALUES ($1, $2, $3, $4, $5::numeric, $6, $7, $8)
ON CONFLICT (user_id, order_key) DO UPDATE SET order_key = EXCLUDED.order_key
RETURNING id`
	confirmReservationSQL = `UPDATE reservations SET status = 'CONFIRMED'
 WHERE user_id = $1 AND reservation_key = $2 AND status = 'HELD'`
	setStockSQL = `INSERT INTO inventory (sku, stock) VALUES ($1, $2)
ON CONFLICT (sku) DO UPDATE SET stock = EXCLUDED.stock, updated_at = now()`
)

// errOutOfStock is the reserve step's permanent failure.
var errOutOfStock = errors.New("out of stock")

// definition is the checkout saga: reserve (local), charge (remote),
// confirm (local). Every reference is derived from the step's sub-key, so
// a step run again after a crash or an unknown outcome has its effect
// once: the reservation's key, the charge's and the refund's idempotency
// keys.
//
// The charge is undone by saga.RefundCharge, which reads the charge's
// intent rather than trusting the step's output: it refunds the whole
// charge once it is known to have succeeded (a refund the provider
// accepted but settles later, Adyen's, counts as done: payments tracks it
// to its end), never refunds one that did not (declined after its step:
// nothing to undo), and while the charge is open it waits, rescheduled, up
// to saga.DefaultSettleWithin, then leaves the checkout NEEDS_REVIEW.
func (s *Service) definition() saga.Definition {
	refund, err := saga.RefundCharge(s.client, nil)
	if err != nil { // only for a nil client, which open never makes
		refund = func(context.Context, *saga.Call) error { return saga.Fail(err) }
	}
	return saga.Definition{Name: SagaName, Steps: []saga.Step{
		{Name: StepReserve, Kind: saga.Local, Action: s.reserve, Compensate: s.release},
		{Name: StepCharge, Kind: saga.Remote, Action: s.chargeStep, Compensate: func(ctx context.Context, c *saga.Call) error {
			s.crash.at(StepCharge+compensateSuffix, phaseBefore)
			return refund(ctx, c)
		}},
		{Name: StepConfirm, Kind: saga.Local, Action: s.confirm},
	}}
}

func (s *Service) reserve(ctx context.Context, c *saga.Call) (any, error) {
	s.crash.at(StepReserve, phaseBefore)
	var o Order
	if err := c.DecodeInput(&o); err != nil {
		return nil, saga.Fail(err)
	}
	var held bool
	if err := c.Tx.QueryRow(ctx, reservedSQL, c.Scope, c.Key).Scan(&held); err != nil {
		return nil, err
	}
	if !held {
		tag, err := c.Tx.Exec(ctx, takeStockSQL, o.SKU, o.Qty)
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() == 0 {
			// An unknown sku has nothing to sell either.
			return nil, saga.Fail(fmt.Errorf("%w: fewer than %d of %q left", errOutOfStock, o.Qty, o.SKU))
		}
		if _, err := c.Tx.Exec(ctx, reserveSQL, c.Scope, c.Key, o.SKU, o.Qty); err != nil {
			return nil, err
		}
	}
	// Not the reservation's key: the output is answered, in problems too,
	// which never echo a key.
	return map[string]any{"sku": o.SKU, "qty": o.Qty}, nil
}

func (s *Service) release(ctx context.Context, c *saga.Call) error {
	s.crash.at(StepReserve+compensateSuffix, phaseBefore)
	_, err := c.Tx.Exec(ctx, releaseSQL, c.Scope, saga.SubKey(c.SagaKey, StepReserve))
	return err
}

func (s *Service) chargeStep(ctx context.Context, c *saga.Call) (any, error) {
	s.crash.at(StepCharge, phaseBefore)
	var o Order
	if err := c.DecodeInput(&o); err != nil {
		return nil, saga.Fail(err)
	}
	amount, err := o.money()
	if err != nil {
		return nil, saga.Fail(err)
	}
	out, err := s.client.Charge(ctx, payments.ChargeParams{Scope: c.Scope, Key: c.Key, Provider: o.Provider,
		Amount: amount, Recipient: o.Recipient, PaymentMethod: o.PaymentMethod,
		Description: fmt.Sprintf("checkout: %d x %s", o.Qty, o.SKU)})
	var cfgErr *payments.ConfigError
	var badInput *idempotency.InvalidError
	switch {
	case errors.As(err, &cfgErr), errors.As(err, &badInput), errors.Is(err, idempotency.ErrFingerprintMismatch):
		// Refused before any charge (the key was also used on
		// POST /charges for another payment): it will never succeed.
		return nil, saga.Fail(err)
	case err != nil:
		return nil, err // saga.DefaultClassify: a decline is permanent, an unknown outcome unknown
	}
	if out.Status != payments.IntentSucceeded {
		// Settled later (a webhook, the reconciler): the intent, not the
		// replayed first answer, says how it ended.
		if in, err := s.client.Intent(ctx, c.Scope, c.Key); err == nil {
			out.Status, out.ProviderID = in.Status, in.ProviderID
		}
		switch out.Status {
		case payments.IntentSucceeded:
		case payments.IntentDeclined, payments.IntentFailed:
			return nil, saga.Fail(fmt.Errorf("charge %s", strings.ToLower(string(out.Status))))
		case payments.IntentRequiresAction:
			// No money moved; this checkout has no way to ask the
			// customer (3-D Secure) and gives the items back.
			return nil, saga.Fail(errors.New("the payment requires the customer's action, which this checkout does not support"))
		default:
			return nil, saga.Unknown(fmt.Errorf("charge %s", out.Status))
		}
	}
	return charged{Provider: out.Provider, ProviderID: out.ProviderID, Amount: out.Amount, Currency: out.Currency}, nil
}

func (s *Service) confirm(ctx context.Context, c *saga.Call) (any, error) {
	s.crash.at(StepConfirm, phaseBefore)
	var o Order
	if err := c.DecodeInput(&o); err != nil {
		return nil, saga.Fail(err)
	}
	if s.confirmCheck != nil {
		if err := s.confirmCheck(ctx, o); err != nil {
			return nil, saga.Fail(err)
		}
	}
	var ch charged
	if err := c.DecodeOutput(StepCharge, &ch); err != nil {
		return nil, saga.Fail(err)
	}
	var id int64
	if err := c.Tx.QueryRow(ctx, orderSQL, c.Scope, c.SagaKey, o.SKU, o.Qty, ch.Amount, ch.Currency, ch.Provider, ch.ProviderID).Scan(&id); err != nil {
		return nil, err
	}
	if _, err := c.Tx.Exec(ctx, confirmReservationSQL, c.Scope, saga.SubKey(c.SagaKey, StepReserve)); err != nil {
		return nil, err
	}
	return map[string]any{"order_id": id, "sku": o.SKU, "qty": o.Qty, "amount": ch.Amount, "currency": ch.Currency,
		"provider": ch.Provider, "provider_id": ch.ProviderID}, nil
}

// setStock sets a sku's stock (POST /inventory).
func (s *Service) setStock(ctx context.Context, sku string, stock int) error {
	_, err := s.pool.Exec(ctx, setStockSQL, sku, stock)
	return err
}

// Crash hook: test-only. See Config.CrashAt.
const (
	phaseBefore = "before" // at the start of the step's action (or compensation)
	phaseCommit = "commit" // its effect done, just before the saga commits its outcome
	phaseAfter  = "after"  // just after that commit

	compensateSuffix = "_compensate"
)

// crashAt is where a test-only crash kills the process; zero: nowhere.
type crashAt struct{ step, phase string }

func parseCrashAt(v string) (crashAt, error) {
	if v == "" {
		return crashAt{}, nil
	}
	step, phase, _ := strings.Cut(v, ":")
	switch step {
	case StepReserve, StepCharge, StepConfirm, StepReserve + compensateSuffix, StepCharge + compensateSuffix:
	default:
		return crashAt{}, fmt.Errorf("CrashAt %q: the step must be reserve, charge, confirm, reserve_compensate or charge_compensate", v)
	}
	switch phase {
	case phaseBefore, phaseCommit, phaseAfter:
	default:
		return crashAt{}, fmt.Errorf("CrashAt %q: the phase must be before, commit or after", v)
	}
	return crashAt{step, phase}, nil
}

// hooks are the saga's commit hooks that kill the process at c (the
// commit and after phases); nil when c kills nowhere or before a step.
// The key a hook gets is the step call's sub-key.
func (c crashAt) hooks() *saga.Hooks {
	if c.step == "" || c.phase == phaseBefore {
		return nil
	}
	kill := func(key string) {
		if strings.HasSuffix(key, "_"+c.step) {
			die()
		}
	}
	if c.phase == phaseCommit {
		return &saga.Hooks{BeforeCommit: kill}
	}
	return &saga.Hooks{AfterCommit: kill}
}

func (c crashAt) at(step, phase string) {
	if c.step == step && c.phase == phase {
		die()
	}
}

// die kills this process as a power cut would: no deferred call, no
// response, no cleanup.
func die() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	select {}
}
