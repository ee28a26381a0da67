// Package relay holds the dialect-neutral pieces compactd relays an upstream answer with: it
// rewrites an upstream SSE stream (or JSON body) event by event without copying what it leaves
// alone, and it guards a stream so that, however the upstream's ends, the client's ends in a
// proper error event rather than a cut.
//
// What an API's events mean is not here: a dialect's rewriter decides what to change in each
// event (EventRewriter calls it with the event's data), and a dialect's guard says which event
// ends its stream normally and how its error events look (GuardOptions). Relay gives them
//
//   - Guard, which passes whole events only, caps one event at MaxEvent, and ends a stream that
//     broke off (or, when asked, carried an event that is not JSON) with the dialect's error
//     events;
//   - EventRewriter, which takes events from the guard (or a Reader of its own) and passes on
//     what the dialect's rewrite returns, ev.Raw byte for byte when nothing changes;
//   - Splice, SpliceEvent and the edit builders (NumberAt, PrependAt), so an event that changes
//     is rendered from slices of its own bytes and the few bytes that change, and GetAlias and
//     ParseAlias, which find those bytes without copying the event;
//   - ReadJSON and ReplaceBody for a non-streaming answer read whole (under MaxJSON).
//
// Nothing here holds more than one event of a stream, and nothing walks bytes that have not
// been checked to be JSON within jsonx's depth bound.
package relay

// MaxEvent bounds one upstream event compactd relays: the stream guard (and so every rewriter
// above it) and the recall loop hold one event at most, and an event over this ends the stream
// with the dialect's error event. Responses streams carry the whole response object in their
// terminal event, so it is the limit of a JSON response compactd reads whole. A variable only so
// a test can lower it (proxy's sse_export_test.go); nothing else sets it.
var MaxEvent = 64 << 20

// MaxJSON bounds a non-streaming response compactd reads whole to rewrite it (ReadJSON). A
// variable only so a test can lower it (proxy's upstream_export_test.go); nothing else sets it.
var MaxJSON int64 = 64 << 20
