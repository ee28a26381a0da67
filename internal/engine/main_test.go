package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (speculative jobs). No ignores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
