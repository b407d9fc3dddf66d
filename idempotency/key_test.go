package idempotency_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
)

func TestComposeKey(t *testing.T) {
	t.Parallel()
	k, err := idempotency.ComposeKey("usr_7fQ9x", "createOrder", "a1b2c3d4-0000-4000-8000-000000000000")
	if err != nil {
		t.Fatal(err)
	}
	if k != "usr_7fQ9x_createOrder_a1b2c3d4-0000-4000-8000-000000000000" {
		t.Fatalf("key = %q", k)
	}
	action, intent, ok := idempotency.SplitKey("usr_7fQ9x", k)
	if !ok || action != "createOrder" || intent != "a1b2c3d4-0000-4000-8000-000000000000" {
		t.Fatalf("split: %q %q %v", action, intent, ok)
	}
}

func TestComposeKeyRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		scope, action, intent, field string
	}{
		{"", "a", "i", "scope"},
		{strings.Repeat("s", 129), "a", "i", "scope"},
		{"usr 1", "a", "i", "scope"},
		{"u", "", "i", "action"},
		{"u", "create_order", "i", "action"},
		{"u", "a", "", "intent"},
		{"u", "a", "x/y", "intent"},
		{"u", "a", "é", "intent"},
		{"u", "a", strings.Repeat("i", 252), "key"},
	}
	for _, c := range cases {
		_, err := idempotency.ComposeKey(c.scope, c.action, c.intent)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("Compose(%q, %q, %q) = %v, want an error naming %s", c.scope, c.action, c.intent, err, c.field)
		}
	}
}

func TestCheckEntropy(t *testing.T) {
	t.Parallel()
	good := []string{
		"3f0c8a9e-5d2b-4c1a-9e7f-0123456789ab", // UUIDv4
		"01ARZ3NDEKTSV4RRFFQ69G5FAV",           // ULID
		"9f86d081884c7d659a2feaa0c55ad015",     // 32 hex = 128 bits
		"Zm9vYmFyYmF6cXV4cXV1eDEy_w",           // 26 base64url chars = 156 bits
	}
	for _, s := range good {
		if err := idempotency.CheckEntropy(s); err != nil {
			t.Errorf("CheckEntropy(%q) = %v", s, err)
		}
	}
	bad := []string{
		"3f0c8a9e-5d2b-1c1a-9e7f-0123456789ab", // UUIDv1
		"order-42",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"9f86d081884c7d659a2feaa0c55ad01", // 31 hex
		"",
	}
	for _, s := range bad {
		// A refusal names the field and the fix, never the key.
		err := idempotency.CheckEntropy(s)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != "intent" || !strings.Contains(ie.Reason, "use a UUIDv4 or a ULID") || (s != "" && strings.Contains(err.Error(), s)) {
			t.Errorf("CheckEntropy(%q) = %v, want an *InvalidError naming intent and the fix", s, err)
		}
	}
	if _, err := (idempotency.KeyPolicy{RequireEntropy: true}).Compose("u", "a", "42"); err == nil {
		t.Error("policy with RequireEntropy accepted a 2-character intent")
	}
}

func TestDeriveIntent(t *testing.T) {
	t.Parallel()
	a := idempotency.DeriveIntent("cart_1", "items_ab")
	if a != idempotency.DeriveIntent("cart_1", "items_ab") {
		t.Fatal("not deterministic")
	}
	if a == idempotency.DeriveIntent("cart_1items_ab") || a == idempotency.DeriveIntent("cart_", "1items_ab") {
		t.Fatal("field boundaries are ambiguous")
	}
	if _, err := idempotency.ComposeKey("svc_webhooks", "stripeEvent", a); err != nil {
		t.Fatal(err)
	}
}

// FuzzComposeKey: composition never panics, a composed key always
// validates, fits the column, and splits back into its parts.
func FuzzComposeKey(f *testing.F) {
	f.Add("usr_7fQ9x", "createOrder", "a1b2c3d4-0000-4000-8000-000000000000")
	f.Add("", "a", "b")
	f.Add("u_", "_", "_")
	f.Add("u", "a.b:c-d", "x_y_z")
	f.Add("\x00", "a", "\xff")
	f.Fuzz(func(t *testing.T, scope, action, intent string) {
		k, err := idempotency.ComposeKey(scope, action, intent)
		if err != nil {
			if !errors.Is(err, idempotency.ErrInvalid) {
				t.Fatalf("error is not ErrInvalid: %v", err)
			}
			return
		}
		if err := idempotency.ValidateKey(k); err != nil {
			t.Fatalf("composed key %q does not validate: %v", k, err)
		}
		if len(k) > idempotency.MaxKeyLen {
			t.Fatalf("composed key is %d bytes", len(k))
		}
		a, i, ok := idempotency.SplitKey(scope, k)
		if !ok || a != action || i != intent {
			t.Fatalf("split(%q) = %q %q %v, want %q %q", k, a, i, ok, action, intent)
		}
	})
}

// FuzzValidateKey: validation never panics and accepts exactly the keys
// of the documented charset and length.
func FuzzValidateKey(f *testing.F) {
	f.Add("usr_1_createOrder_x")
	f.Add("")
	f.Add(strings.Repeat("k", 256))
	f.Add("a b")
	f.Fuzz(func(t *testing.T, k string) {
		err := idempotency.ValidateKey(k)
		want := len(k) >= 1 && len(k) <= 255
		for i := 0; i < len(k) && want; i++ {
			c := k[i]
			want = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0
		}
		if (err == nil) != want {
			t.Fatalf("ValidateKey(%q) = %v, want valid=%v", k, err, want)
		}
	})
}
