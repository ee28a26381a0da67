//go:build unix

package bench

import (
	"syscall"
	"time"
)

// cpuTime is the user+system CPU time of the whole process so far (getrusage RUSAGE_SELF).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
