package cputime

import "testing"

func TestProcessAdvances(t *testing.T) {
	start := Process()
	x := 0
	for i := range 50_000_000 {
		x += i ^ (x >> 3)
	}
	if Process() <= start {
		t.Errorf("CPU time did not advance over a busy loop (x=%d)", x)
	}
}
