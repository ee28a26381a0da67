package eval

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (the proxy and fake upstream an evaluation starts). No ignores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
