// Package inbox gives message consumers an exactly-once effect on
// at-least-once delivery: queue redelivery (River, Kafka, NATS JetStream,
// AMQP), webhook resends, a producer that sends twice.
//
// Each message has a stable identity: the broker's message id where the
// producer sets one deliberately (a JetStream Nats-Msg-Id, a River job's
// arguments), or [idempotency.DeriveIntent] of its identifying fields,
// never a time of delivery. [Inbox.HandleTx] claims that identity in the
// idempotency store and runs the handler in the same PostgreSQL
// transaction as the record: the handler's writes and the fact that the
// message was processed commit together, or neither does. A redelivery
// after a crash therefore finds either the effect committed (the message
// is a duplicate: ack it, the handler does not run again) or nothing (the
// handler runs again, as the first time).
//
//	in, err := inbox.New(store, &inbox.Config{Retention: 7 * 24 * time.Hour})
//	...
//	out, err := in.HandleTx(ctx, inbox.Message{Source: "orders", ID: msg.ID, Fingerprint: fp},
//		func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
//			_, err := tx.Exec(ctx, `INSERT INTO orders ...`)
//			return err
//		})
//	if out.Ack() { msg.Ack() } else { msg.Nak() }
//
// # Outcomes
//
//	Processed   the handler ran and its writes committed now: ack
//	Duplicate   an earlier delivery's effect is committed: ack, nothing ran
//	Poison      the handler failed for good (idempotency.Permanent), now or
//	            in an earlier delivery, or the identity came back with other
//	            content: the failure is recorded and replayed to every
//	            redelivery; ack it and dead-letter it (Config.DeadLetter)
//	Retry       a transient failure (nothing committed), or another consumer
//	            is processing the same message right now: leave the
//	            message to the broker's redelivery (nak, or return the error)
//
// # Retention
//
// A record is kept for Config.Retention: it must outlive the broker's
// redelivery horizon (River's retry policy, JetStream's MaxDeliver ×
// AckWait and its duplicate window, a producer's retries). A message
// redelivered after its record expired runs again as new.
//
// # Effects outside the database
//
// [Inbox.Handle] runs a handler whose effects are elsewhere (an email, a
// provider call) under the same claim, without a transaction: it runs at
// most once at a time and again only if its holder died before recording
// the outcome, so such effects must themselves be idempotent downstream,
// with a key derived from the message's identity ([Message.Key]), as
// payonce's payments are with the providers.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// Message is one delivery of a message.
type Message struct {
	// Source names the stream, queue or job kind ("orders", "river_charge"):
	// the scope of the message's key: letters, digits and . _ : -
	// (idempotency.ValidateScope).
	Source string
	// ID is the message's stable identity within Source: a producer-set
	// message id, or idempotency.DeriveIntent of its identifying fields
	// (also the way to bring an id with other characters than letters,
	// digits and . _ : - to the key). Never a delivery time or a delivery
	// counter.
	ID string
	// Fingerprint covers the message's significant fields: a message whose
	// identity comes back with other content is poison, never applied.
	Fingerprint idempotency.Fingerprint
	// Attempt is the broker's delivery count (1 for the first delivery; 0
	// when unknown): counted in inbox.redeliveries when above 1.
	Attempt int
}

// Key is the message's idempotency key, "<source>_msg_<id>": the key to
// derive any downstream idempotency key from.
func (m Message) Key() (string, error) {
	return idempotency.ComposeKey(m.Source, "msg", m.ID)
}

// Outcome is what a delivery came to, and what to tell the broker.
type Outcome int

const (
	// Retry: nothing committed (a transient failure, or another consumer
	// holds the message right now); leave it to the broker's redelivery.
	Retry Outcome = iota
	// Processed: the handler ran and its outcome is recorded now.
	Processed
	// Duplicate: an earlier delivery was processed; nothing ran.
	Duplicate
	// Poison: a permanent failure is recorded for the message (now or
	// earlier), or its identity came back with other content.
	Poison
)

func (o Outcome) String() string {
	switch o {
	case Retry:
		return "retry"
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	case Poison:
		return "poison"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Ack reports whether the broker should be told the message is done:
// every outcome but Retry.
func (o Outcome) Ack() bool { return o != Retry }

// TxHandler handles a message inside the transaction that records it.
type TxHandler func(ctx context.Context, tx pgx.Tx, m Message) error

// Handler handles a message whose effects are outside the database.
type Handler func(ctx context.Context, m Message) error

// Config configures an Inbox. The zero value (or nil) means defaults.
type Config struct {
	// Retention is how long a message's record is kept: longer than the
	// broker may redeliver it. Default 7 days.
	Retention time.Duration
	// LockTimeout is the lease of a message being handled by Handle (kept
	// alive by heartbeats); a consumer that died is taken over after it.
	// Default 30s.
	LockTimeout time.Duration
	// DeadLetter, when set, is called with every Poison outcome and its
	// reason, after the failure is recorded (so at least once per poison
	// message, again on each redelivery the broker makes before the ack
	// lands): make it idempotent on Message.Key.
	DeadLetter func(ctx context.Context, m Message, reason error)
	// MeterProvider receives the inbox instruments. Default: none.
	MeterProvider metric.MeterProvider
	// Logger receives warnings. Default: discarded.
	Logger *slog.Logger
}

// Inbox records which messages were processed, in PostgreSQL.
type Inbox struct {
	exec    *pgstore.Executor
	cfg     Config
	metrics *metrics
}

// New returns an Inbox over store. A nil cfg means defaults; a bad field
// gives an *idempotency.InvalidError naming it.
func New(store *pgstore.Store, cfg *Config) (*Inbox, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	switch {
	case store == nil:
		return nil, &idempotency.InvalidError{Field: "store", Reason: "nil"}
	case c.Retention < 0:
		return nil, &idempotency.InvalidError{Field: "Config.Retention", Reason: fmt.Sprintf("must not be negative, got %s", c.Retention)}
	case c.LockTimeout < 0:
		return nil, &idempotency.InvalidError{Field: "Config.LockTimeout", Reason: fmt.Sprintf("must not be negative, got %s", c.LockTimeout)}
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = 30 * time.Second
	}
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{Retention: c.Retention, LockTimeout: c.LockTimeout,
		MeterProvider: c.MeterProvider, Logger: c.Logger})
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(c.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("inbox: metrics: %w", err)
	}
	return &Inbox{exec: exec, cfg: c, metrics: m}, nil
}

func (in *Inbox) request(m Message) (idempotency.Request, error) {
	if m.ID == "" {
		return idempotency.Request{}, &idempotency.InvalidError{Field: "Message.ID", Reason: "empty: a message needs a stable identity"}
	}
	if m.Attempt < 0 {
		return idempotency.Request{}, &idempotency.InvalidError{Field: "Message.Attempt", Reason: fmt.Sprintf("must not be negative, got %d", m.Attempt)}
	}
	key, err := m.Key()
	if err != nil {
		return idempotency.Request{}, err
	}
	return idempotency.Request{Scope: m.Source, Key: key, Fingerprint: m.Fingerprint}, nil
}

// HandleTx handles one delivery of m: h runs in the transaction that
// records m as processed, unless an earlier delivery was. See the package
// doc for the outcomes. The error is nil for Processed and Duplicate; the
// recorded failure for Poison (errors.Is(err, idempotency.ErrFailed), or
// idempotency.ErrFingerprintMismatch); the reason for Retry. A malformed
// message is an *idempotency.InvalidError with outcome Retry: nothing is
// recorded, and the consumer's own code must be fixed.
func (in *Inbox) HandleTx(ctx context.Context, m Message, h TxHandler) (Outcome, error) {
	req, err := in.request(m)
	if err != nil {
		return Retry, err
	}
	res, err := in.exec.DoTx(ctx, req, func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
		return idempotency.Response{}, h(ctx, tx, m)
	})
	return in.settle(ctx, m, res, err)
}

// Handle is HandleTx for a handler whose effects are outside the database:
// the message is claimed under a lease, h runs, and its outcome is
// recorded. A consumer that dies while h runs leaves the message to be
// taken over after Config.LockTimeout by the next delivery: h may then run
// again, so its effects must be idempotent downstream on m.Key().
func (in *Inbox) Handle(ctx context.Context, m Message, h Handler) (Outcome, error) {
	req, err := in.request(m)
	if err != nil {
		return Retry, err
	}
	res, err := in.exec.Do(ctx, req, func(ctx context.Context) (idempotency.Response, error) {
		return idempotency.Response{}, h(ctx, m)
	})
	return in.settle(ctx, m, res, err)
}

func (in *Inbox) settle(ctx context.Context, m Message, res idempotency.Result, err error) (Outcome, error) {
	var out Outcome
	switch {
	case err == nil && res.Replayed:
		out = Duplicate
	case err == nil:
		out = Processed
	case errors.Is(err, idempotency.ErrFailed), errors.Is(err, idempotency.ErrFingerprintMismatch),
		errors.Is(err, idempotency.ErrForeignKey):
		out = Poison
	default:
		out = Retry
	}
	in.metrics.record(ctx, m, out)
	if out == Poison && in.cfg.DeadLetter != nil {
		in.cfg.DeadLetter(ctx, m, err)
	}
	return out, err
}
