package recallbench

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (the archives a run opens end
// with Close). No ignores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
