package idempotency

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ErrUndecryptable: a stored response is sealed but cannot be opened,
// because its key id is not in the [Keyring] or because it fails
// authentication (corrupted, tampered with, or copied from another record).
// It is returned wrapped with the key id and nothing else, and nothing is
// replayed.
var ErrUndecryptable = newSentinel("idempotency: stored response cannot be decrypted", false)

// KeySize is the size of every key of a [Keyring]: AES-256.
const KeySize = 32

// maxKeyIDLen bounds a key id, which is stored in every envelope.
const maxKeyIDLen = 32

// Keyring holds the keys that seal and open stored responses (see
// [Encrypted]). Each key has an id, stored beside every ciphertext it
// sealed: the current key seals, every key in the ring opens, so keys can
// rotate while older records stay readable. Create it with [NewKeyring] or
// [ParseKeyring]; it is safe for concurrent use and never prints its key
// material, whatever the format verb.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// NewKeyring returns a keyring whose key current seals and whose keys all
// open. Key ids are 1 to 32 letters, digits, '-' or '_' (they are stored in
// clear beside the ciphertext); each key is exactly [KeySize] random bytes.
// The keys are copied into the ring: the caller may wipe its slices.
//
// Errors are *InvalidError naming "current", "keys" or keys["<id>"]; they
// never include key material, nor a malformed key id (which might be a key
// pasted in the wrong place).
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, invalid("keys", "empty: the ring needs at least its current key")
	}
	ids := slices.Sorted(maps.Keys(keys))
	kr := &Keyring{current: current, aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, id := range ids {
		if !validKeyID(id) {
			return nil, invalid("keys", "a key id (%d bytes) is not 1 to %d letters, digits, '-' or '_'", len(id), maxKeyIDLen)
		}
		field := fmt.Sprintf("keys[%q]", id)
		if len(keys[id]) != KeySize {
			return nil, invalid(field, "must be %d bytes (AES-256), got %d", KeySize, len(keys[id]))
		}
		block, err := aes.NewCipher(keys[id])
		if err != nil {
			return nil, invalid(field, "not a usable AES key")
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, invalid(field, "not a usable AES-GCM key")
		}
		kr.aeads[id] = aead
	}
	switch {
	case current == "":
		return nil, invalid("current", "empty: name the id of the key that seals")
	case !validKeyID(current):
		return nil, invalid("current", "not a valid key id (1 to %d letters, digits, '-' or '_')", maxKeyIDLen)
	case kr.aeads[current] == nil:
		return nil, invalid("current", "no key with id %q in the ring", current)
	}
	return kr, nil
}

// ParseKeyring builds a keyring from a configuration string, typically an
// environment variable:
//
//	current=2025-06;2025-06=<base64 of 32 bytes>;2024-12=<base64 of 32 bytes>
//
// Entries are separated by ';' and are "name=value"; spaces around entries
// and empty entries are ignored. The entry named "current" gives the id of
// the sealing key (so no key may be called "current"); every other entry is
// a key id and its key in standard base64, padded or not (as printed by
// `openssl rand -base64 32`).
//
// Errors are *InvalidError naming "keyring", "current", "keys" or
// keys["<id>"], as for [NewKeyring]; they never include key material.
func ParseKeyring(spec string) (*Keyring, error) {
	var (
		current    string
		hasCurrent bool
		keys       = make(map[string][]byte)
	)
	defer func() {
		for _, k := range keys {
			clear(k) // the ring holds its own copies
		}
	}()
	for i, entry := range strings.Split(spec, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, value, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, invalid("keyring", "entry %d is not name=value", i+1)
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if name == "current" {
			if hasCurrent {
				return nil, invalid("current", "given twice")
			}
			current, hasCurrent = value, true
			continue
		}
		if !validKeyID(name) {
			return nil, invalid("keys", "the key id of entry %d (%d bytes) is not 1 to %d letters, digits, '-' or '_'", i+1, len(name), maxKeyIDLen)
		}
		field := fmt.Sprintf("keys[%q]", name)
		if _, dup := keys[name]; dup {
			return nil, invalid(field, "given twice")
		}
		key, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			key, err = base64.RawStdEncoding.DecodeString(value)
		}
		if err != nil {
			return nil, invalid(field, "not standard base64")
		}
		keys[name] = key
	}
	if len(keys) == 0 && !hasCurrent {
		return nil, invalid("keyring", "empty: want current=<id>;<id>=<base64 key>")
	}
	if !hasCurrent {
		return nil, invalid("current", "missing: add current=<id>")
	}
	return NewKeyring(current, keys)
}

// Current returns the id of the key that seals.
func (kr *Keyring) Current() string { return kr.current }

// KeyIDs returns the ids of every key in the ring, sorted.
func (kr *Keyring) KeyIDs() []string { return slices.Sorted(maps.Keys(kr.aeads)) }

// String describes the ring by its key ids only.
func (kr *Keyring) String() string {
	return fmt.Sprintf("Keyring(current=%s, ids=%s)", kr.current, strings.Join(kr.KeyIDs(), ","))
}

// Format prints [Keyring.String] for every verb, so that no verb (%d, %x,
// %#v) ever walks into the key schedules.
func (kr *Keyring) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, kr.String()) }

func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > maxKeyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Encrypted returns a Store that seals every stored response with kr
// before it reaches inner, and opens it again on [Store.Claim] and
// [Store.Get]. It works with every Store, and so under [Executor], the
// HTTP middleware and anything else that takes a Store. The returned Store
// implements [Sizer] and [Abandoner] exactly when inner does, delegating to
// it, so the idempotency.store_size gauge and abandoned claims behave as
// without encryption. Encrypted panics with an
// *InvalidError when inner or kr is nil.
//
// # Encryption at rest
//
// Stored responses may hold personal data. Wrapped by Encrypted, a store
// holds each response's headers and body only as one AES-256-GCM
// ciphertext, in the place of the body (pgstore: response_raw; its
// response_body metadata stays NULL):
//
//	"\xffPOE" | version 1 | len(key id) | key id | 12-byte random nonce | ciphertext and tag
//
// The status code stays in clear for operators, as do the scope, the key,
// the fingerprint, the status and the times. The record's scope and key,
// its status and its status code are the GCM additional data: a sealed
// response copied to another record, or whose status or code was changed,
// fails to open. Opening restores Header and Body exactly as they were
// given to Complete, nil or empty alike.
//
//	kr, err := idempotency.ParseKeyring(os.Getenv("PAYONCE_RESPONSE_KEYS"))
//	...
//	exec, err := idempotency.New(idempotency.Encrypted(pgStore, kr), nil)
//
// A response that cannot be opened (its key id is not in the ring, or it
// fails authentication) is never replayed: Claim and Get return
// [ErrUndecryptable], naming the key id.
//
// Rotation: add the new key to every instance's ring first, then make it
// current everywhere; keep each old key until every record it sealed has
// expired (the executor's Retention), then remove it. Each key should seal
// well under 2^32 responses (the bound for random 96-bit nonces).
//
// Turning encryption on is safe for existing records: a response without
// the envelope's magic prefix is returned as it was stored. (A plaintext
// body stored before that happened to start with the 4-byte prefix would
// fail with ErrUndecryptable rather than be replayed; no text body can,
// since 0xff never occurs in UTF-8.) Authentication covers sealed
// responses only: as long as unsealed ones are accepted, whoever can write
// the table can still plant one. Turning encryption off is not safe: the
// inner store alone would replay envelopes as bodies, so keep the wrapper
// until every sealed record has expired.
//
// Only what goes through the returned Store is sealed. pgstore.NewExecutor
// (Do, DoTx, WithTx) and pgstore's Store.CompleteTx work on the
// *pgstore.Store itself: the responses they store are not sealed.
func Encrypted(inner Store, kr *Keyring) Store {
	if inner == nil {
		panic(invalid("inner", "nil Store"))
	}
	if kr == nil || len(kr.aeads) == 0 {
		panic(invalid("kr", "nil or empty Keyring: build it with NewKeyring or ParseKeyring"))
	}
	s := &encryptedStore{inner: inner, kr: kr}
	// The optional interfaces pass through as they are: neither touches a
	// stored response (Abandon deletes a PROCESSING record, which has
	// none). A type assertion on the result tells the truth about inner.
	sizer, isSizer := inner.(Sizer)
	abandoner, isAbandoner := inner.(Abandoner)
	switch {
	case isSizer && isAbandoner:
		return struct {
			*encryptedStore
			Sizer
			Abandoner
		}{s, sizer, abandoner}
	case isSizer:
		return struct {
			*encryptedStore
			Sizer
		}{s, sizer}
	case isAbandoner:
		return struct {
			*encryptedStore
			Abandoner
		}{s, abandoner}
	}
	return s
}

type encryptedStore struct {
	inner Store
	kr    *Keyring
}

var _ Store = (*encryptedStore)(nil)

// Seals reports that responses are sealed: an executor's replay cache
// keeps nothing of this store.
func (s *encryptedStore) Seals() bool { return true }

func (s *encryptedStore) Claim(ctx context.Context, p ClaimParams) (Claim, error) {
	c, err := s.inner.Claim(ctx, p)
	if err != nil || c.Record.Response == nil {
		return c, err
	}
	resp, err := s.kr.open(p.Scope, p.Key, c.Record.Status, *c.Record.Response)
	if err != nil {
		return Claim{}, err
	}
	c.Record.Response = &resp
	return c, nil
}

func (s *encryptedStore) Complete(ctx context.Context, l Lease, c Completion) error {
	sealed, err := s.kr.seal(l.Scope, l.Key, c.Status, c.Response)
	if err != nil {
		return err
	}
	c.Response = Response{Code: c.Response.Code, Body: sealed}
	return s.inner.Complete(ctx, l, c)
}

func (s *encryptedStore) Release(ctx context.Context, l Lease) error {
	return s.inner.Release(ctx, l)
}

func (s *encryptedStore) Heartbeat(ctx context.Context, l Lease, d time.Duration) error {
	return s.inner.Heartbeat(ctx, l, d)
}

func (s *encryptedStore) Get(ctx context.Context, scope, key string) (Record, error) {
	rec, err := s.inner.Get(ctx, scope, key)
	if err != nil || rec.Response == nil {
		return rec, err
	}
	resp, err := s.kr.open(scope, key, rec.Status, *rec.Response)
	if err != nil {
		return Record{}, err
	}
	rec.Response = &resp
	return rec, nil
}

func (s *encryptedStore) Prune(ctx context.Context, limit int) (int, error) {
	return s.inner.Prune(ctx, limit)
}

// The envelope: magic, version, key id length and key id (together the
// envelope's header), nonce, then the ciphertext with its tag.
const (
	envelopeMagic   = "\xffPOE"
	envelopeVersion = 1
	nonceSize       = 12
)

// Seal returns r as [Encrypted] stores it for the record (scope, key) in
// status: the code in clear, headers and body sealed into the body. For
// stores that seal on their own (pgstore's Config.Keyring).
func (kr *Keyring) Seal(scope, key string, status Status, r Response) (Response, error) {
	sealed, err := kr.seal(scope, key, status, r)
	if err != nil {
		return Response{}, err
	}
	return Response{Code: r.Code, Body: sealed}, nil
}

// Open restores a response sealed by [Keyring.Seal] for the record (scope,
// key) in status; a response stored unsealed is returned as it is. Errors
// wrap ErrUndecryptable.
func (kr *Keyring) Open(scope, key string, status Status, r Response) (Response, error) {
	return kr.open(scope, key, status, r)
}

// seal returns the envelope of r's headers and body, bound to the record.
func (kr *Keyring) seal(scope, key string, status Status, r Response) ([]byte, error) {
	aead := kr.aeads[kr.current]
	plain := encodePlain(r)
	defer clear(plain)
	env := make([]byte, 0, len(envelopeMagic)+2+len(kr.current)+nonceSize+len(plain)+aead.Overhead())
	env = append(env, envelopeMagic...)
	env = append(env, envelopeVersion, byte(len(kr.current)))
	env = append(env, kr.current...)
	header := len(env)
	var nonce [nonceSize]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("idempotency: seal response: %w", err)
	}
	env = append(env, nonce[:]...)
	return aead.Seal(env, nonce[:], plain, additionalData(env[:header], scope, key, status, r.Code)), nil
}

// open returns r with its headers and body restored from its envelope, or
// r as it is when its body is no envelope (stored before encryption).
func (kr *Keyring) open(scope, key string, status Status, r Response) (Response, error) {
	env := r.Body
	if !bytes.HasPrefix(env, []byte(envelopeMagic)) {
		return r, nil
	}
	rest := env[len(envelopeMagic):]
	if len(rest) < 2 {
		return Response{}, fmt.Errorf("%w: truncated envelope", ErrUndecryptable)
	}
	if rest[0] != envelopeVersion {
		return Response{}, fmt.Errorf("%w: unknown envelope version %d", ErrUndecryptable, rest[0])
	}
	n := int(rest[1])
	if len(rest) < 2+n {
		return Response{}, fmt.Errorf("%w: truncated envelope", ErrUndecryptable)
	}
	kid := string(rest[2 : 2+n])
	if !validKeyID(kid) {
		return Response{}, fmt.Errorf("%w: malformed key id", ErrUndecryptable)
	}
	aead := kr.aeads[kid]
	if aead == nil {
		return Response{}, fmt.Errorf("%w: key id %q is not in the keyring", ErrUndecryptable, kid)
	}
	header := len(envelopeMagic) + 2 + n
	if len(env) < header+nonceSize+aead.Overhead() {
		return Response{}, fmt.Errorf("%w: key id %q: truncated envelope", ErrUndecryptable, kid)
	}
	nonce, sealed := env[header:header+nonceSize], env[header+nonceSize:]
	plain, err := aead.Open(nil, nonce, sealed, additionalData(env[:header], scope, key, status, r.Code))
	if err != nil {
		return Response{}, fmt.Errorf("%w: key id %q: authentication failed", ErrUndecryptable, kid)
	}
	h, body, err := decodePlain(plain)
	if err != nil {
		return Response{}, fmt.Errorf("%w: key id %q: %v", ErrUndecryptable, kid, err)
	}
	return Response{Code: r.Code, Header: h, Body: body}, nil
}

// additionalData binds a sealed response to its envelope header and to its
// record: scope, key, status and status code, each unambiguously framed.
func additionalData(header []byte, scope, key string, status Status, code int) []byte {
	ad := make([]byte, 0, len(header)+len(scope)+len(key)+len(status)+16)
	ad = append(ad, header...)
	ad = appendBytes(ad, scope)
	ad = appendBytes(ad, key)
	ad = appendBytes(ad, string(status))
	return binary.AppendVarint(ad, int64(code))
}

// The plaintext: a flags byte, the header (its number of names, then per
// name in sorted order: the name, its number of values plus one, or 0 for
// nil, and the values; each string length-prefixed), and the body as the
// rest.
const (
	plainHasHeader = 1 << 0 // Header was not nil
	plainHasBody   = 1 << 1 // Body was not nil
)

func encodePlain(r Response) []byte {
	var flags byte
	if r.Header != nil {
		flags |= plainHasHeader
	}
	if r.Body != nil {
		flags |= plainHasBody
	}
	size := 1 + binary.MaxVarintLen64 + len(r.Body)
	for name, values := range r.Header {
		size += 2*binary.MaxVarintLen64 + len(name)
		for _, v := range values {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	for _, name := range slices.Sorted(maps.Keys(r.Header)) {
		b = appendBytes(b, name)
		values := r.Header[name]
		if values == nil {
			b = append(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(values))+1)
		for _, v := range values {
			b = appendBytes(b, v)
		}
	}
	return append(b, r.Body...)
}

func appendBytes(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errMalformedPlain = errors.New("malformed plaintext")

func decodePlain(b []byte) (http.Header, []byte, error) {
	if len(b) < 1 {
		return nil, nil, errMalformedPlain
	}
	flags := b[0]
	b = b[1:]
	next := func() (uint64, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return n, true
	}
	str := func() (string, bool) {
		n, ok := next()
		if !ok || n > uint64(len(b)) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	names, ok := next()
	if !ok || names > uint64(len(b)) {
		return nil, nil, errMalformedPlain
	}
	var h http.Header
	if flags&plainHasHeader != 0 {
		h = make(http.Header, names)
	} else if names > 0 {
		return nil, nil, errMalformedPlain
	}
	for range names {
		name, ok := str()
		if !ok {
			return nil, nil, errMalformedPlain
		}
		count, ok := next()
		if !ok || count > uint64(len(b))+1 {
			return nil, nil, errMalformedPlain
		}
		if count == 0 {
			h[name] = nil
			continue
		}
		count--
		values := make([]string, 0, count)
		for range count {
			v, ok := str()
			if !ok {
				return nil, nil, errMalformedPlain
			}
			values = append(values, v)
		}
		h[name] = values
	}
	var body []byte
	if flags&plainHasBody != 0 {
		body = b
	} else if len(b) > 0 {
		return nil, nil, errMalformedPlain
	}
	return h, body, nil
}
