// Package inbox gives message consumers an exactly-once effect on
// at-least-once delivery: queue redelivery (River, Kafka, NATS JetStream,
// AMQP), webhook resends, a producer that sends twice.
//
// Each message has a stable identity: the broker's message id where the
// producer sets one deliberately (a JetStream Nats-Msg-Id, a River job's
// arguments), or [idempotency.DeriveIntent] of its identifying fields,
// never a time of delivery. An id with other characters than letters,
// digits and . _ : - (a Kafka topic/partition/offset, a NATS message id)
// goes through [MessageID]. [Inbox.HandleTx] claims that identity in the
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
//	            redelivery; ack it and dead-letter it (Config.DeadLetter).
//	            A malformed message is Poison too, nothing recorded (below)
//	Retry       a transient failure (nothing committed), or another consumer
//	            is processing the same message right now: leave the
//	            message to the broker's redelivery (nak, or return the error)
//
// # Malformed messages
//
// A message the inbox cannot key is refused before anything is claimed
// or run: a Source outside letters, digits and . _ : -, an empty ID or
// one with other characters (pass it through [MessageID]), a missing or
// malformed Fingerprint (build it with [idempotency.NewFingerprint]), a
// negative Attempt. No redelivery could fix such a message, so it is never
// Retry: the outcome is Poison (ack it; the dead-letter hook gets it),
// the error an *idempotency.InvalidError (errors.Is
// idempotency.ErrInvalid) naming the field and the fix, and nothing is
// recorded. The fix is in the consumer's code; once deployed, republish
// the dead-lettered messages.
//
// # Message identities
//
// [MessageID] turns an identity of any bytes, in one or several parts,
// into an ID: the SHA-256 of the length-prefixed parts
// ([idempotency.DeriveIntent]), 64 hex characters. It never changes for
// the same parts, and different parts do not share an ID. A raw id and
// MessageID of that id are two identities: choose one form per Source and
// keep it.
//
//	inbox.MessageID(rec.Topic, strconv.Itoa(int(rec.Partition)), strconv.FormatInt(rec.Offset, 10)) // Kafka
//	inbox.MessageID(msg.Headers().Get(jetstream.MsgIDHeader))                                       // NATS
//
// Which identity to take is the broker's question. A Kafka record's
// topic/partition/offset is the record: a redelivery after a rebalance
// or a crash before the offset commit is the same message, but a producer
// that retried a send (without enable.idempotence) wrote a second record
// with another offset; an event id set by the producer covers both.
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

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
)

// Message is one delivery of a message.
type Message struct {
	// Source names the stream, queue or job kind ("orders", "river_charge"):
	// the scope of the message's key: letters, digits and . _ : -
	// (idempotency.ValidateScope).
	Source string
	// ID is the message's stable identity within Source: a producer-set
	// message id of letters, digits and . _ : -, or [MessageID] of the
	// broker's id or of the message's identifying fields (any bytes).
	// Never a delivery time or a delivery counter. Required.
	ID string
	// Fingerprint covers the message's significant fields (build it with
	// idempotency.NewFingerprint): a message whose identity comes back
	// with other content is poison, never applied. Required.
	Fingerprint idempotency.Fingerprint
	// Attempt is the broker's delivery count (1 for the first delivery; 0
	// when unknown): counted in inbox.redeliveries when above 1.
	Attempt int
}

// Key is the message's idempotency key, "<source>_msg_<id>": the key to
// derive any downstream idempotency key from. Errors are
// *idempotency.InvalidError naming Message.Source or Message.ID and the
// fix.
func (m Message) Key() (string, error) {
	if err := idempotency.ValidateScope(m.Source); err != nil {
		return "", invalid("Message.Source", "%s: name the stream, queue or job kind with a constant of letters, digits and . _ : - (\"orders\", \"river_charge\")", reasonOf(err))
	}
	if m.ID == "" {
		return "", invalid("Message.ID", "empty: a message needs a stable identity: the producer's message id, or inbox.MessageID of its identifying fields")
	}
	key, err := idempotency.ComposeKey(m.Source, "msg", m.ID)
	if err != nil {
		return "", invalid("Message.ID", "%s; pass the broker's id through inbox.MessageID (Kafka: MessageID(topic, partition, offset); NATS: MessageID(Nats-Msg-Id)), which hashes any bytes with idempotency.DeriveIntent", reasonOf(err))
	}
	return key, nil
}

// MessageID returns the ID of a message whose identity is parts, in any
// bytes: a Kafka record's topic, partition and offset, a NATS message id
// with slashes or spaces, a producer's event id, or the fields that
// identify the message. It is [idempotency.DeriveIntent] of the parts: the
// SHA-256 of the parts, each length-prefixed, as 64 hex characters, so the same
// parts always give the same ID, ("a/b", "c") and ("a", "b/c") differ,
// and any length fits in a key. natsinbox's default identity is
// MessageID(Nats-Msg-Id).
//
// MessageID returns "" when no part is given or every part is empty (a
// message without its id): HandleTx then refuses the message (Poison,
// Message.ID empty) rather than giving every such message one shared
// identity, under which all but the first would be dropped as duplicates.
func MessageID(parts ...string) string {
	for _, p := range parts {
		if p != "" {
			return idempotency.DeriveIntent(parts...)
		}
	}
	return ""
}

func invalid(field, format string, args ...any) error {
	return &idempotency.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// reasonOf is an error's reason without its field: the inbox names the
// Message field itself.
func reasonOf(err error) string {
	var ie *idempotency.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
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
	// earlier), or its identity came back with other content, or the
	// message is malformed (an *idempotency.InvalidError; nothing
	// recorded).
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

// TxHandler handles a message inside the transaction that records it: a
// pgx.Tx over pgstore.
type TxHandler[TTx idempotency.Tx] func(ctx context.Context, tx TTx, m Message) error

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
	// lands): make it idempotent on Message.Key. A malformed message's
	// reason is an *idempotency.InvalidError and nothing was recorded; its
	// Message.Key may fail, so key such a message on the broker's own id.
	DeadLetter func(ctx context.Context, m Message, reason error)
	// MeterProvider receives the inbox instruments. Default: none.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span around each message: idempotency.DoTx
	// for HandleTx, idempotency.Do for Handle (message keys as short hashes
	// only). Default: no spans.
	TracerProvider trace.TracerProvider
	// Logger receives warnings, and an error for each malformed message.
	// Default: discarded.
	Logger *slog.Logger
}

// Inbox records which messages were processed, in the store's database:
// PostgreSQL through pgstore (TTx is pgx.Tx), or memory through memstore
// in tests.
type Inbox[TTx idempotency.Tx] struct {
	exec    *idempotency.TxExecutor[TTx]
	cfg     Config
	metrics *metrics
	log     *slog.Logger
}

// New returns an Inbox over store, the transaction-aware seam
// (*pgstore.Store is an idempotency.TxStore[pgx.Tx]). A nil cfg means
// defaults; a bad field gives an *idempotency.InvalidError naming it.
func New[TTx idempotency.Tx](store idempotency.TxStore[TTx], cfg *Config) (*Inbox[TTx], error) {
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
	exec, err := idempotency.NewTx(store, &idempotency.Config{Retention: c.Retention, LockTimeout: c.LockTimeout,
		MeterProvider: c.MeterProvider, TracerProvider: c.TracerProvider, Logger: c.Logger})
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(c.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("inbox: metrics: %w", err)
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Inbox[TTx]{exec: exec, cfg: c, metrics: m, log: log}, nil
}

// request checks m before anything is claimed; errors name the field and
// the fix.
func (in *Inbox[TTx]) request(m Message) (idempotency.Request, error) {
	key, err := m.Key()
	if err != nil {
		return idempotency.Request{}, err
	}
	if m.Fingerprint == "" {
		return idempotency.Request{}, invalid("Message.Fingerprint", "empty: build it with idempotency.NewFingerprint() over the message's significant fields (its payload), so that an identity coming back with other content is caught")
	}
	if err := m.Fingerprint.Validate(); err != nil {
		return idempotency.Request{}, invalid("Message.Fingerprint", "%s: build it with idempotency.NewFingerprint() over the message's significant fields, then Sum()", reasonOf(err))
	}
	if m.Attempt < 0 {
		return idempotency.Request{}, invalid("Message.Attempt", "must not be negative, got %d: pass the broker's delivery count (1 for the first delivery), or 0 when unknown", m.Attempt)
	}
	return idempotency.Request{Scope: m.Source, Key: key, Fingerprint: m.Fingerprint}, nil
}

// refuse answers a malformed message: Poison, with the reason, nothing
// recorded. No redelivery could make it valid.
func (in *Inbox[TTx]) refuse(ctx context.Context, m Message, reason error) (Outcome, error) {
	source := m.Source
	if idempotency.ValidateScope(source) != nil {
		source = "(invalid)" // bounded: never an arbitrary string as a metric attribute
	}
	in.log.Error("inbox: malformed message refused as poison, nothing recorded: fix the consumer, then republish it",
		"source", source, "err", reason)
	in.metrics.record(ctx, Message{Source: source, Attempt: m.Attempt}, Poison)
	if in.cfg.DeadLetter != nil {
		in.cfg.DeadLetter(ctx, m, reason)
	}
	return Poison, reason
}

// HandleTx handles one delivery of m: h runs in the transaction that
// records m as processed, unless an earlier delivery was. See the package
// doc for the outcomes. The error is nil for Processed and Duplicate; for
// Poison, the recorded failure (errors.Is(err, idempotency.ErrFailed), or
// idempotency.ErrFingerprintMismatch) or, for a malformed message, an
// *idempotency.InvalidError naming the field and the fix (h did not run,
// nothing is recorded); the reason for Retry.
func (in *Inbox[TTx]) HandleTx(ctx context.Context, m Message, h TxHandler[TTx]) (Outcome, error) {
	req, err := in.request(m)
	if err != nil {
		return in.refuse(ctx, m, err)
	}
	res, err := in.exec.DoTx(ctx, req, func(ctx context.Context, tx TTx) (idempotency.Response, error) {
		return idempotency.Response{}, h(ctx, tx, m)
	})
	return in.settle(ctx, m, res, err)
}

// Handle is HandleTx for a handler whose effects are outside the database:
// the message is claimed under a lease, h runs, and its outcome is
// recorded. A consumer that dies while h runs leaves the message to be
// taken over after Config.LockTimeout by the next delivery: h may then run
// again, so its effects must be idempotent downstream on m.Key().
func (in *Inbox[TTx]) Handle(ctx context.Context, m Message, h Handler) (Outcome, error) {
	req, err := in.request(m)
	if err != nil {
		return in.refuse(ctx, m, err)
	}
	res, err := in.exec.Do(ctx, req, func(ctx context.Context) (idempotency.Response, error) {
		return idempotency.Response{}, h(ctx, m)
	})
	return in.settle(ctx, m, res, err)
}

func (in *Inbox[TTx]) settle(ctx context.Context, m Message, res idempotency.Result, err error) (Outcome, error) {
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
