package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// Limits of keys and scopes, matching the idempotency_store columns.
const (
	MaxKeyLen   = 255
	MaxScopeLen = 128
)

// Keys have the form "{scope}_{action}_{intent}":
//   - scope: the authenticated user, account or tenant (from authentication,
//     never from the request body); letters, digits and . _ : -
//   - action: the operation ("createOrder", "charge"); letters, digits and
//     . : - but no underscore, so that a key splits back unambiguously once
//     its scope is known;
//   - intent: the client's key (UUID, ULID, ...) or, for server-generated
//     keys, [DeriveIntent] of the intent's identifying fields; letters,
//     digits and . _ : -
//
// A key never contains a time-varying part: expiry is a column, not a key
// part.

func keyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '-'
}

func checkChars(field, s string, allowUnderscore bool) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !keyChar(c) || (c == '_' && !allowUnderscore) {
			allowed := "letters, digits and . _ : -"
			if !allowUnderscore {
				allowed = "letters, digits and . : -"
			}
			return invalid(field, "byte %d (%q) is not allowed: use %s", i, c, allowed)
		}
	}
	return nil
}

// ValidateScope checks a scope: 1 to 128 bytes of letters, digits and
// . _ : -.
func ValidateScope(scope string) error {
	if scope == "" {
		return invalid("scope", "empty: every key belongs to an authenticated scope")
	}
	if len(scope) > MaxScopeLen {
		return invalid("scope", "%d bytes, at most %d allowed", len(scope), MaxScopeLen)
	}
	return checkChars("scope", scope, true)
}

// ValidateAction checks an action name: 1 to 64 bytes of letters, digits
// and . : - (no underscore).
func ValidateAction(action string) error {
	if action == "" {
		return invalid("action", "empty")
	}
	if len(action) > 64 {
		return invalid("action", "%d bytes, at most 64 allowed", len(action))
	}
	return checkChars("action", action, false)
}

// ValidateKey checks a composed key: 1 to 255 bytes of letters, digits and
// . _ : -.
func ValidateKey(key string) error {
	if key == "" {
		return invalid("key", "empty")
	}
	if len(key) > MaxKeyLen {
		return invalid("key", "%d bytes, at most %d allowed", len(key), MaxKeyLen)
	}
	return checkChars("key", key, true)
}

// KeyPolicy composes and validates keys.
type KeyPolicy struct {
	// RequireEntropy refuses client intents that cannot carry 128 bits of
	// entropy (see [CheckEntropy]). Default false, for server-derived
	// intents ([DeriveIntent], a message id, a cron slot), which no other
	// caller chooses; set it when the intent is a client's key, as
	// [Middleware] does unless MiddlewareConfig.AllowLowEntropyKeys.
	RequireEntropy bool
}

// ComposeKey is KeyPolicy{}.Compose.
func ComposeKey(scope, action, intent string) (string, error) {
	return KeyPolicy{}.Compose(scope, action, intent)
}

// Compose returns "{scope}_{action}_{intent}" after validating each part
// and the whole. Errors are *InvalidError naming the part.
func (p KeyPolicy) Compose(scope, action, intent string) (string, error) {
	if err := ValidateScope(scope); err != nil {
		return "", err
	}
	if err := ValidateAction(action); err != nil {
		return "", err
	}
	if intent == "" {
		return "", invalid("intent", "empty")
	}
	if err := checkChars("intent", intent, true); err != nil {
		return "", err
	}
	if p.RequireEntropy {
		if err := CheckEntropy(intent); err != nil {
			return "", err
		}
	}
	key := scope + "_" + action + "_" + intent
	if len(key) > MaxKeyLen {
		return "", invalid("key", "composed key is %d bytes, at most %d allowed (shorten the intent, or derive it with DeriveIntent)", len(key), MaxKeyLen)
	}
	return key, nil
}

// SplitKey splits a composed key of a known scope back into its action and
// intent. ok is false when key was not composed under scope.
func SplitKey(scope, key string) (action, intent string, ok bool) {
	rest, found := strings.CutPrefix(key, scope+"_")
	if !found {
		return "", "", false
	}
	action, intent, found = strings.Cut(rest, "_")
	if !found || action == "" || intent == "" {
		return "", "", false
	}
	return action, intent, true
}

// DeriveIntent returns the intent part of a server-generated key (webhooks,
// queue messages, cron runs): the SHA-256, 64 hex characters, of the
// intent's identifying fields, length-prefixed so that ("ab","c") and
// ("a","bc") differ. Never pass a time that varies between retries.
func DeriveIntent(fields ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range fields {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CheckEntropy reports whether a client-supplied intent can carry at least
// 128 bits of entropy. Accepted: a UUID in its 36-character form whose
// version is 4 (random) — 122 random bits, the conventional 128-bit
// identifier; a ULID (26 Crockford base32 characters); or any other string
// whose length times log2 of its alphabet (hex 4 bits, base32 5,
// base64url 6 per character) reaches 128 bits. Strings of one repeated
// character are refused whatever their length.
//
// It checks what a key can carry, not how it was made: "order-1" is
// refused, but a long counter would pass. Client keys must come from a
// cryptographic random source (a UUIDv4 or a ULID library), new for each
// operation and the same for its retries. Errors are *InvalidError naming
// "intent", without the key.
func CheckEntropy(intent string) error {
	if why := entropyShortfall(intent); why != "" {
		return invalid("intent", "%s: use a UUIDv4 or a ULID", why)
	}
	return nil
}

// entropyShortfall says why intent cannot carry 128 bits, or "" when it
// can.
func entropyShortfall(intent string) string {
	if intent == "" {
		return "empty"
	}
	if isUUID(intent) {
		if intent[14] != '4' {
			return "a UUID must be version 4 (random) to carry 128 bits of entropy"
		}
		return ""
	}
	if isULID(intent) {
		return ""
	}
	if strings.Count(intent, intent[:1]) == len(intent) {
		return "one repeated character carries no entropy"
	}
	bitsPer := 6
	switch {
	case isHex(intent):
		bitsPer = 4
	case isCrockford(intent):
		bitsPer = 5
	}
	if len(intent)*bitsPer < 128 {
		return fmt.Sprintf("%d characters carry at most %d bits; at least 128 are required", len(intent), len(intent)*bitsPer)
	}
	return ""
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHexByte(s[i]) {
				return false
			}
		}
	}
	return true
}

func isULID(s string) bool {
	return len(s) == 26 && s[0] <= '7' && isCrockford(s)
}

func isCrockford(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z') || c == 'I' || c == 'L' || c == 'O' || c == 'U' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHexByte(s[i]) {
			return false
		}
	}
	return true
}

func isHexByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
