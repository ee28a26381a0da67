package loadtest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines once more after all tests (each test already checks its
// own with goleak.VerifyNone). No ignores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
