// Package cputime reads the process's CPU time, for benchmarks on shared machines: wall-clock
// ns/op counts time spent waiting for a core, CPU time per operation does not (it does include
// work the operation causes on other threads, such as garbage collection).
package cputime

import (
	"testing"
	"time"
)

// Report adds a cpu-ns/op metric to b: process CPU time since start (a Process reading taken
// just before the benchmark loop) divided by b.N. Call it after the loop.
func Report(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(Process()-start)/float64(b.N), "cpu-ns/op")
	}
}
