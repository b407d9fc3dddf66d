// Package usesbroken checks that the fingerprint type is found by package
// path, also when it comes from export data.
package usesbroken

import "github.com/payonce/payonce/lab/cmd/fpcheck/testdata/brokenequal"

func Same(a, b brokenequal.Fingerprint) bool {
	return a == b // want `== on brokenequal.Fingerprint values`
}
