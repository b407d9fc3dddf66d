// Package rows stores a fingerprint in an exported string field; package
// cross compares it.
package rows

import "github.com/payonce/payonce/idempotency"

type Row struct {
	Key, FP string
}

func New(key string, fp idempotency.Fingerprint) Row { return Row{Key: key, FP: string(fp)} }
