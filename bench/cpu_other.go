//go:build !unix

package bench

import "time"

// cpuTime is unavailable off unix; CPU columns then read 0.
func cpuTime() time.Duration { return 0 }
