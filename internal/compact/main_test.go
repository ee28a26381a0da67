package compact

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (a Counter's background worker ends with Close). No ignores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
