// Package natsinbox consumes a NATS JetStream pull consumer through an
// [inbox.Inbox]: each message's effect commits once with the inbox's
// record, however often JetStream delivers it.
//
// JetStream delivers at least once: a message not acked within the
// consumer's AckWait (its consumer crashed, or ran longer) is delivered
// again, to any consumer. [Consume] hands each message to
// inbox.HandleTx, then tells JetStream by the outcome: Ack for Processed
// and Duplicate (the effect is committed, now or earlier), Term for Poison
// (recorded and dead-lettered: never redelivered), Nak with a delay for
// Retry (nothing committed). A consumer killed between its commit and its
// ack leaves a message that comes back and is acked as a Duplicate.
//
// # The message's identity
//
// By default the identity is the Nats-Msg-Id header, which publishers set
// for JetStream's own deduplication, through [inbox.MessageID] (any bytes
// work: slashes, spaces, any length): a publish retried with the same id
// within the stream's Duplicates window is dropped by JetStream itself; the
// inbox covers what that window does not (a redelivery to consumers, which
// JetStream never deduplicates, and a republish after the window). Without
// the header, Config.ID must derive the identity from the message's
// identifying fields (idempotency.DeriveIntent), never from a delivery
// time or the stream sequence, which changes when the same event is
// published twice.
//
// # Other brokers
//
// The same shape serves any at-least-once consumer: identity from a
// producer-set id through inbox.MessageID (Kafka: a header or the event's
// id field; else MessageID(topic, partition, offset), which recognises a
// redelivered record but not a producer's retry, written as a new record;
// AMQP: the message-id property), HandleTx, then commit the offset or ack
// only for outcomes whose Ack() is true, and leave Retry to redelivery
// (Kafka: do not commit past it; AMQP: nack with requeue).
package natsinbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/inbox"
)

// Config configures Consume.
type Config struct {
	// Source is the inbox source of the messages (the stream or consumer's
	// name). Required.
	Source string
	// ID returns a message's identity, an inbox.Message.ID: letters,
	// digits and . _ : -, or inbox.MessageID of anything else. Default:
	// inbox.MessageID of its Nats-Msg-Id header; a message without one is
	// poison (terminated).
	ID func(msg jetstream.Msg) (string, error)
	// Fingerprint returns the fingerprint of a message's significant
	// fields. Default: its subject and payload.
	Fingerprint func(msg jetstream.Msg) (idempotency.Fingerprint, error)
	// RetryDelay is the Nak delay of a Retry outcome. Default 1s.
	RetryDelay time.Duration
	// FetchWait bounds each wait for the next message. Default 1s.
	FetchWait time.Duration

	// beforeAck, in tests, runs after HandleTx and before the ack.
	beforeAck func(msg jetstream.Msg, out inbox.Outcome)
}

var errNoID = errors.New("natsinbox: message without a Nats-Msg-Id header")

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Source == "" {
		return out, &idempotency.InvalidError{Field: "Config.Source", Reason: "required"}
	}
	if err := idempotency.ValidateScope(out.Source); err != nil {
		return out, &idempotency.InvalidError{Field: "Config.Source", Reason: err.Error()}
	}
	if out.ID == nil {
		out.ID = func(msg jetstream.Msg) (string, error) {
			if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
				return inbox.MessageID(id), nil
			}
			return "", errNoID
		}
	}
	if out.Fingerprint == nil {
		out.Fingerprint = func(msg jetstream.Msg) (idempotency.Fingerprint, error) {
			return idempotency.NewFingerprint().String("subject", msg.Subject()).Bytes("data", msg.Data()).Sum()
		}
	}
	if out.RetryDelay <= 0 {
		out.RetryDelay = time.Second
	}
	if out.FetchWait <= 0 {
		out.FetchWait = time.Second
	}
	return out, nil
}

// Consume handles cons's messages through in until ctx ends, with h run in
// each message's transaction. It returns ctx's error, or the first error
// JetStream gave that is not a fetch timeout. Run it in as many goroutines
// (or processes) as needed: the inbox keeps each message's effect single
// across all of them.
func Consume[TTx idempotency.Tx](ctx context.Context, cons jetstream.Consumer, in *inbox.Inbox[TTx], cfg Config, h inbox.TxHandler[TTx]) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		msg, err := cons.Next(jetstream.FetchMaxWait(c.FetchWait))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("natsinbox: next message: %w", err)
		}
		if err := Handle(ctx, msg, in, c, h); err != nil && ctx.Err() == nil {
			return err
		}
	}
	return ctx.Err()
}

// Handle handles one message: HandleTx, then Ack, Term or Nak by the
// outcome. Its error is JetStream's answer to that, not the handler's (a
// Retry's reason is in the Nak's delay, a Poison's in the Term's reason).
// A message the inbox refuses as malformed (Config.ID returning an id
// outside the key's characters, Config.Fingerprint returning an empty
// fingerprint) is Poison: terminated, never redelivered. cfg's unset
// fields take their defaults; a bad cfg is an *idempotency.InvalidError,
// the message left alone.
func Handle[TTx idempotency.Tx](ctx context.Context, msg jetstream.Msg, in *inbox.Inbox[TTx], cfg Config, h inbox.TxHandler[TTx]) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	id, err := c.ID(msg)
	if err != nil {
		return msg.TermWithReason(err.Error())
	}
	fp, err := c.Fingerprint(msg)
	if err != nil {
		return msg.TermWithReason(err.Error())
	}
	attempt := 0
	if md, err := msg.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	out, herr := in.HandleTx(ctx, inbox.Message{Source: c.Source, ID: id, Fingerprint: fp, Attempt: attempt}, h)
	if c.beforeAck != nil {
		c.beforeAck(msg, out)
	}
	switch out {
	case inbox.Poison:
		return msg.TermWithReason(herr.Error())
	case inbox.Retry:
		return msg.NakWithDelay(c.RetryDelay)
	}
	return msg.Ack()
}
