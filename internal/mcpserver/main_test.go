package mcpserver

import (
	"testing"

	"go.uber.org/goleak"
)

// The MCP SDK runs each session's connection on goroutines; a test that leaves one running fails.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
