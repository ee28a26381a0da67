package proxy

import (
	"net/http"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/turn"
)

// Each dialect's side of the stream guard (relay.Guard, internal/relay): which event ends its
// stream normally, and the error events a broken stream ends with.

// The dialects' terminal tests as the func values relay.Guard takes, made once: a method value
// made for each stream would be one more allocation per stream.
var (
	chatTerminal = dialectChat.Terminal
)

// guardPassThrough guards the stream of a Messages or Chat Completions request compactd
// forwarded untouched: the event cap only (relay.GuardOptions.CapOnly), ended with the dialect's error event.
func guardPassThrough(resp *http.Response, d dialect) {
	if !relay.Guardable(resp) {
		return
	}
	relay.Guard(resp, relay.GuardOptions{CapOnly: true, Fail: func(_ int, why string) []byte {
		return d.FaultEvent(invalidUpstream(d, false, why), nil)
	}})
}

// upstreamInterrupted is the error a stream ends with when the upstream's broke off.
func upstreamInterrupted() *fault.Fault { return turn.UpstreamInterrupted() }

// guardChatStream guards a Chat Completions stream: it ends normally at `data: [DONE]`; broken
// off before it, it ends with an error chunk (chatDialect.errorEvent), which the openai SDKs
// report as a stream error, instead of looking like a short, complete answer.
func guardChatStream(resp *http.Response, validate bool) {
	if !relay.Guardable(resp) {
		return // not a stream: no guard, and no closure allocated for one
	}
	relay.Guard(resp, relay.GuardOptions{Terminal: chatTerminal, Validate: validate, Fail: func(_ int, why string) []byte {
		e := upstreamInterrupted()
		if why != "" {
			e = invalidUpstream(dialectChat, false, why)
		}
		return dialectChat.FaultEvent(e, nil)
	}})
}
