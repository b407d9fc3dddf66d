// Package keycheck checks that payonce keeps full idempotency keys out of
// what a service logs, answers and traces, through the checkout example
// under a provider that answers for another key. Its tests are the whole
// package.
package keycheck
