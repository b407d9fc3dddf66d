package main

import (
	"slices"
	"testing"
)

// TestBalancedOrder checks the design measureInterleaved runs the paths
// in: each row runs every path once, and over one cycle of rows every
// path runs first equally often and right after every other path equally
// often, whatever row the cycle starts at.
func TestBalancedOrder(t *testing.T) {
	for n := 1; n <= 9; n++ {
		rows := n
		if n%2 == 1 {
			rows = 2 * n
		}
		for start := range 3 {
			first := make([]int, n)
			follows := map[[2]int]int{}
			for k := start; k < start+rows; k++ {
				order := balancedOrder(n, k)
				sorted := slices.Sorted(slices.Values(order))
				for i, p := range sorted {
					if p != i {
						t.Fatalf("n=%d row %d: %v is not an order of the %d paths", n, k, order, n)
					}
				}
				first[order[0]]++
				for j := 1; j < n; j++ {
					follows[[2]int{order[j-1], order[j]}]++
				}
			}
			for p, c := range first {
				if c != rows/n {
					t.Errorf("n=%d from row %d: path %d runs first %d times in %d rows, want %d", n, start, p, c, rows, rows/n)
				}
			}
			for a := range n {
				for b := range n {
					if a != b && follows[[2]int{a, b}] != rows/n {
						t.Errorf("n=%d from row %d: path %d runs right after path %d %d times in %d rows, want %d",
							n, start, b, a, follows[[2]int{a, b}], rows, rows/n)
					}
				}
			}
		}
	}
}
