//go:build !unix

package cputime

import "time"

// Process is unavailable off unix and reads 0.
func Process() time.Duration { return 0 }
