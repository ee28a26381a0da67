package proxy

import (
	"net/http"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/turn"
)

// Each dialect's side of the stream guard (relay.Guard, internal/relay): which event ends its
// stream normally, and the error events a broken stream ends with.

// guardPassThrough guards the stream of a Messages or Chat Completions request compactd
// forwarded untouched: the event cap only (relay.GuardOptions.CapOnly), ended with the dialect's error event.
func guardPassThrough(resp *http.Response, d dialect) {
	if !relay.Guardable(resp) {
		return
	}
	relay.Guard(resp, relay.GuardOptions{CapOnly: true, Fail: func(_ int, why string) []byte {
		return d.FaultEvent(turn.UpstreamInvalid(d.Words(), false, why), nil)
	}})
}

// upstreamInterrupted is the error a stream ends with when the upstream's broke off.
func upstreamInterrupted() *fault.Fault { return turn.UpstreamInterrupted() }
