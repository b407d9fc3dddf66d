package pgstore

import (
	"math"
	"sync"
	"testing"
)

// A boxed seconds argument is always the value asked for, whatever the
// slots held before: colliding values replace each other, concurrent
// callers never see another value's box.
func TestSecondsArgsAreExact(t *testing.T) {
	var c secondsArgs
	values := []float64{0, 30, 86400, 0.5, 1e-9, math.Inf(1), -1, 30.000000001, 2592000, math.SmallestNonzeroFloat64}
	for i := range 200 {
		values = append(values, float64(i)*1.5)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 200 {
				for i := range values {
					v := values[(i*(g+1)+round)%len(values)]
					got, ok := c.arg(v).(float64)
					if !ok || math.Float64bits(got) != math.Float64bits(v) {
						t.Errorf("arg(%v) = %v", v, c.arg(v))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if a := c.arg(math.Copysign(0, -1)).(float64); !math.Signbit(a) {
		t.Errorf("arg(-0) lost its sign: %v", a)
	}
}
