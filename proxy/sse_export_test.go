package proxy

// SetEventCapForTest lowers the size limit of one upstream SSE event, so a test can send an
// oversized event without 64 MiB of traffic; restore puts the limit back.
func SetEventCapForTest(n int) (restore func()) {
	old := maxSSEEvent
	maxSSEEvent = n
	return func() { maxSSEEvent = old }
}
