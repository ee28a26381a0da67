package proxy

import "github.com/compactd/compactd/internal/relay"

// SetEventCapForTest lowers the size limit of one upstream SSE event (relay.MaxEvent), so a test
// can send an oversized event without 64 MiB of traffic; restore puts the limit back.
func SetEventCapForTest(n int) (restore func()) {
	old := relay.MaxEvent
	relay.MaxEvent = n
	return func() { relay.MaxEvent = old }
}
