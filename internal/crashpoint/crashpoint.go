// Package crashpoint lets tests stop a process at a named point of
// payonce's code (payments calls Hit at each recovery point). Outside
// tests nothing is set and Hit does nothing.
package crashpoint

import "sync/atomic"

var hook atomic.Pointer[func(point, key string)]

// Set installs f for every later Hit in this process; nil removes it.
// Tests call it in a child process they then kill at a point.
func Set(f func(point, key string)) {
	if f == nil {
		hook.Store(nil)
		return
	}
	hook.Store(&f)
}

// Hit reports reaching point while working on key.
func Hit(point, key string) {
	if f := hook.Load(); f != nil {
		(*f)(point, key)
	}
}
