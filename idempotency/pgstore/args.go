package pgstore

import (
	"math"
	"sync/atomic"
)

// Statement arguments travel to pgx as []any, and turning a float64, an
// int64 or a string into an interface value allocates. The values that
// are the same on every call of a store (its instance and incarnation,
// the lease and retention seconds of its executors' Config) are boxed
// once and reused: a claim and its completion then allocate only for
// what differs per call (key, scope, fingerprint, response).

// boxedArgs holds a store's constant arguments, boxed.
type boxedArgs struct {
	instance, incarnation any
	seconds               secondsArgs
}

func newBoxedArgs(instance string, incarnation int64) boxedArgs {
	return boxedArgs{instance: instance, incarnation: incarnation}
}

// secondsArgs remembers the boxed form of the last few second counts, in
// a few slots chosen by the value's bits; a value not found is boxed (and
// remembered) on the spot, so that any value is always right.
type secondsArgs struct {
	slots [8]atomic.Pointer[secondsArg]
}

type secondsArg struct {
	v   float64
	arg any
}

func (c *secondsArgs) arg(v float64) any {
	bits := math.Float64bits(v)
	slot := &c.slots[(bits^bits>>29^bits>>47)%uint64(len(c.slots))]
	if a := slot.Load(); a != nil && math.Float64bits(a.v) == bits {
		return a.arg
	}
	a := &secondsArg{v: v, arg: v}
	slot.Store(a)
	return a.arg
}
