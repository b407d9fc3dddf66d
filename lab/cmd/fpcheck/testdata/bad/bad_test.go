package bad

import (
	"testing"

	"github.com/payonce/payonce/idempotency"
)

// Tests are checked too.
func TestSame(t *testing.T) {
	a, _ := idempotency.NewFingerprint().String("f", "1").Sum()
	if a != a { // want `!= on idempotency.Fingerprint values`
		t.Fatal("differs")
	}
}
