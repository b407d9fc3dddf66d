// Package brokenequal stands in for package idempotency with an Equal
// that a hurried refactor made variable time: its own body is not exempt.
package brokenequal

type Fingerprint string

func (f Fingerprint) Equal(g Fingerprint) bool { // want `Fingerprint.Equal does not call crypto/subtle.ConstantTimeCompare`
	return f == g // want `== on brokenequal.Fingerprint values`
}
