// Package stackcheck is a test helper for the linear-walk tests: it runs a function with every
// goroutine stack capped, so a walk that recurses once per nesting level kills the test binary at
// once ("goroutine stack exceeds … limit") instead of passing after minutes of quadratic work, and
// it reports what the function allocated, so a test can bound the walk by the input's size
// without timing anything.
package stackcheck

import (
	"runtime"
	"runtime/debug"
)

// Cap is the stack limit Run sets: far above what an iterative walk needs, far below what a
// recursive one needs on a 100k-deep value (a kilobyte or more per level).
const Cap = 16 << 20

// Run runs f on a fresh goroutine with stacks capped at Cap and returns the heap bytes allocated
// meanwhile. Tests that use it must not run in parallel: the cap and the allocation counter are
// process-wide.
func Run(f func()) uint64 {
	old := debug.SetMaxStack(Cap)
	defer debug.SetMaxStack(old)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	<-done
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
