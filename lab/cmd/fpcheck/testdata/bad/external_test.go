package bad_test

import (
	"testing"

	"github.com/payonce/payonce/lab/cmd/fpcheck/testdata/bad"
)

// An external test package is checked too, and the type defined in the
// package under test is known to be a fingerprint.
func TestExternal(t *testing.T) {
	var a, b bad.MyFP
	if a == b { // want `== on bad.MyFP values`
		t.Fatal("equal")
	}
}
