package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"
)

// Codec encodes the values [Do] stores and decodes them on replay. Its
// methods have the shape of encoding/json's, so most encoding packages
// plug in with a two-line adapter. An implementation must decode what it
// encoded into an equal value, and keep decoding what earlier versions
// of the program stored for as long as the retention lasts.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default [Codec]: encoding/json.
type JSON struct{}

// Marshal returns the JSON encoding of v.
func (JSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes the JSON data into v.
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// DoOption configures one call of [Do].
type DoOption func(*doOptions)

type doOptions struct {
	codec   Codec
	fields  *FingerprintBuilder
	wait    time.Duration
	result  *Result
	noCache bool
}

// WithCodec stores the value with c instead of [JSON].
func WithCodec(c Codec) DoOption { return func(o *doOptions) { o.codec = c } }

// SignificantFields fingerprints the call with b, the input's significant
// fields listed explicitly, instead of the canonical encoding of the
// whole input. It is the recommended way: see [Do]. An error met while
// building b is returned by Do, which then runs nothing.
func SignificantFields(b *FingerprintBuilder) DoOption {
	return func(o *doOptions) { o.fields = b }
}

// WaitInFlight makes a call whose key another caller is running wait up
// to d for that caller's outcome and return it, polling the store with
// backoff (25ms doubling to 250ms), instead of answering an
// *InProgressError at once. Default 0: no wait.
func WaitInFlight(d time.Duration) DoOption { return func(o *doOptions) { o.wait = d } }

// ReportResult stores in *r the executor's [Result] of the call: whether
// it was a replay (Replayed), took over a crashed holder's record
// (Reclaimed), and the stored status.
func ReportResult(r *Result) DoOption { return func(o *doOptions) { o.result = r } }

// NoReplayCache sends the call to the store even when the executor has a
// [ReplayCache] (see [Request].NoCache).
func NoReplayCache() DoOption { return func(o *doOptions) { o.noCache = true } }

// contentTypeDo is the Content-Type header stored with the values of
// [Do]: operators listing records see what a row holds.
const contentTypeDo = "application/vnd.payonce.value"

// errNotEncodable marks an outcome whose value the codec refused: the
// action ran, so it is stored FAILED rather than released to run again.
var errNotEncodable = errors.New("idempotency: Do: the value could not be encoded")

// Do runs fn once for (scope, key) through exec (an [Executor], or
// pgstore's Executor.WithTx() so that fn's writes, through the
// transaction of pgstore.TxFromContext, commit with the stored value) and
// returns its value; every later call with the same scope and key gets
// the stored value back, decoded, without running fn. It is
// [Executor.Do] for work whose result is a Go value rather than an HTTP
// response: a queue consumer, a job, an RPC. key is a composed key
// ([ComposeKey]).
//
// The value is encoded with the codec ([JSON] unless [WithCodec]) and
// stored; the caller that ran fn gets the decoded copy too, so every
// caller, the first included, gets the same value (a field the codec
// drops is missing at once, not only on the first retry).
//
// # Fingerprint
//
// By default the fingerprint is the SHA-256 of the canonical JSON of input
// (object keys sorted, whitespace gone): a retry with an equal input
// replays, one with another input is refused with ErrFingerprintMismatch.
// Pass [SignificantFields] instead where you can, for two reasons. Every
// field of the input counts: a field added to the input's type in a later
// release changes the fingerprint of every call in flight during the
// deploy, and their retries are refused as mismatches. And a volatile
// field (a timestamp, a trace or request id, an attempt counter) makes
// every retry a mismatch. The significant fields of an action (for a
// charge: amount, currency, recipient, method) are a decision, and
// writing them down keeps it stable. input is then not encoded and may be
// nil.
//
// # Errors
//
// The errors of [Executor.Do], with a zero T: *InvalidError (a bad scope,
// key or input, nothing run), *InProgressError (another caller holds the
// key; see [WaitInFlight]), ErrFingerprintMismatch, ErrExpired,
// ErrLeaseLost, *FailedError (fn returned an error made with [Permanent],
// now or on a replay), fn's own transient error (the key is released and
// a retry runs fn again), a store error. A value the codec cannot encode
// is a *FailedError wrapping the codec's error: fn ran, so its key is not
// released to run it again; a stored value it cannot decode (a codec or a
// type changed under live records) is an error naming the key's short
// hash.
func Do[T any](ctx context.Context, exec Doer, scope, key string, input any,
	fn func(ctx context.Context) (T, error), opts ...DoOption) (T, error) {
	var zero T
	o := doOptions{codec: JSON{}}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case exec == nil:
		return zero, invalid("Do: exec", "nil: pass an *idempotency.Executor or pgstore's Executor.WithTx()")
	case fn == nil:
		return zero, invalid("Do: fn", "nil")
	case o.codec == nil:
		return zero, invalid("Do: WithCodec", "nil codec: leave the option out for JSON")
	case o.wait < 0:
		return zero, invalid("Do: WaitInFlight", "must not be negative, got %s", o.wait)
	}
	fp, err := doFingerprint(input, o.fields)
	if err != nil {
		return zero, err
	}
	req := Request{Scope: scope, Key: key, Fingerprint: fp, NoCache: o.noCache}
	if err := req.Validate(); err != nil {
		return zero, err
	}
	action := func(ctx context.Context) (Response, error) {
		v, err := fn(ctx)
		if err != nil {
			return Response{}, err
		}
		body, err := o.codec.Marshal(v)
		if err != nil {
			return Response{}, Permanent(fmt.Errorf("%w: %T: %w", errNotEncodable, v, err),
				Response{Code: http.StatusInternalServerError})
		}
		return Response{Code: http.StatusOK, Header: http.Header{"Content-Type": {contentTypeDo}}, Body: body}, nil
	}
	deadline := time.Now().Add(o.wait)
	var res Result
	for wait := firstPoll; ; wait = nextPoll(wait) {
		res, err = exec.Do(ctx, req, action)
		var ip *InProgressError
		if !errors.As(err, &ip) || !time.Now().Add(wait).Before(deadline) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return zero, err
		}
	}
	if o.result != nil {
		*o.result = res
	}
	if err != nil {
		return zero, err
	}
	var v T
	if err := o.codec.Unmarshal(res.Response.Body, &v); err != nil {
		return zero, fmt.Errorf("idempotency: Do: decode the value stored for key %s as %T: %w", ShortHash(key), v, err)
	}
	return v, nil
}

// doFingerprint is Do's fingerprint: the significant fields when given,
// else the canonical JSON of input.
func doFingerprint(input any, fields *FingerprintBuilder) (Fingerprint, error) {
	if fields != nil {
		return fields.Sum()
	}
	if input == nil || isNilPointer(input) {
		return "", invalid("Do: input", "nil: pass the input the key stands for (its canonical JSON is the fingerprint), or idempotency.SignificantFields(...)")
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return "", invalid("Do: input", "%T has no JSON encoding (%v): pass idempotency.SignificantFields(...) instead", input, err)
	}
	canon, err := canonicalJSON(raw)
	if err != nil {
		return "", invalid("Do: input", "%v", err)
	}
	return NewFingerprint().Bytes("input", canon).Sum()
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// canonicalJSON re-encodes a JSON document with object keys sorted and no
// insignificant whitespace; numbers keep their literal form.
func canonicalJSON(raw []byte) ([]byte, error) {
	doc, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// decodeJSON decodes one JSON document, numbers as json.Number (their
// literal form), refusing trailing data.
func decodeJSON(raw []byte) (any, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the JSON document")
	}
	return doc, nil
}

// The polling of a call that waits for another caller's outcome (Do's
// WaitInFlight, the middleware's): 25ms doubling to 250ms.
const firstPoll = 25 * time.Millisecond

func nextPoll(d time.Duration) time.Duration { return min(d*2, 250*time.Millisecond) }
