// Package cross compares a field that package rows fills with a
// fingerprint: what a field holds is learnt across packages.
package cross

import "github.com/payonce/payonce/lab/cmd/fpcheck/testdata/rows"

func Same(a, b rows.Row) bool {
	_ = a.Key == b.Key
	return a.FP == b.FP // want `== on a fingerprint held as string`
}
