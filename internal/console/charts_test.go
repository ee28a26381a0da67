package console

import "testing"

// The axis top is the next 1, 2 or 5 × 10^n at or above the largest value, below 1 too (a
// 45 ms summariser latency got a 1 s axis and bars too flat to read).
func TestNiceTop(t *testing.T) {
	for _, tt := range []struct{ v, want float64 }{
		{0, 1}, {-3, 1}, {0.045, 0.05}, {0.31, 0.5}, {1, 1}, {1.2, 2}, {7376, 10000}, {14014, 20000}, {200, 200},
	} {
		if got := niceTop(tt.v); got < tt.want*0.9999 || got > tt.want*1.0001 {
			t.Errorf("niceTop(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
