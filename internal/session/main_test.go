package session

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (the gap check's workers, the session watcher). No ignores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
