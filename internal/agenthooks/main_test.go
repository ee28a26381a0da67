package agenthooks

import (
	"testing"

	"go.uber.org/goleak"
)

// Run starts a goroutine per hook (bounded by its timeout); none may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
