package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (the proxy, fake upstream and load workers a benchmark run starts). No ignores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
