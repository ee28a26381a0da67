package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/metrics"
	"github.com/compactd/compactd/internal/turn"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/eventlog"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/owner"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
)

// Recall gives the model its memory back. After a compaction, compactd offers the upstream model
// a tool; when the model calls it, compactd searches the conversation's archive itself, answers
// with the best raw excerpts, and calls the upstream again. The client never sees these calls —
// not in JSON, not in SSE — and the usage it gets is the sum of all the rounds.
//
// One loop serves every dialect (this file): rounds, the archive search, JSON and SSE relaying,
// renumbering, errors. What differs per dialect — the tool's JSON, how a round's calls are found,
// how a tool result is fed back, how usage is summed and how the final answer is rendered — sits
// behind recallDialect (recall_responses.go, recall_messages.go).
//
// What the client sees of a round that called the tool: what the model produced before its first
// tool call (text, reasoning), streamed live, as part of one answer. Everything from the first
// tool call of such a round on is hidden, the client's own tool calls included: the model is
// re-asked with the recall results in hand and calls the client's tools again if it still needs
// them. Holding only the tail of a round (a tool call comes last in practice) keeps the answer
// streaming, and the client never gets a call that the model then re-issues.

// RecallConfig bounds the recall tool.
type RecallConfig struct {
	Disabled     bool   // no recall tool even when an archive is configured
	ToolName     string // default DefaultRecallToolName
	Description  string // default: defaultRecallDescription
	MaxRounds    int    // recall rounds per turn (default DefaultRecallMaxRounds); the last round may not call the tool
	TopK         int    // excerpts per search (default DefaultRecallTopK)
	ExcerptBytes int    // bytes per excerpt (default DefaultRecallExcerptBytes)
}

// Defaults of zero RecallConfig fields.
const (
	DefaultRecallToolName     = "compactd_recall"
	DefaultRecallMaxRounds    = 3
	DefaultRecallTopK         = 5
	DefaultRecallExcerptBytes = 1200
)

const defaultRecallDescription = "Search the verbatim history of this conversation from before it was compacted " +
	"(file contents, command output, error messages, exact values, earlier decisions). Use it whenever the " +
	"summary lacks a detail you need; prefer exact identifiers, paths, or error words as the query."

const recallQueryDescription = "words to search for: identifiers, paths, error text, values"

func (c RecallConfig) withDefaults() RecallConfig {
	if c.ToolName == "" {
		c.ToolName = DefaultRecallToolName
	}
	if c.Description == "" {
		c.Description = defaultRecallDescription
	}
	if c.MaxRounds <= 0 {
		c.MaxRounds = DefaultRecallMaxRounds
	}
	if c.TopK <= 0 {
		c.TopK = DefaultRecallTopK
	}
	if c.ExcerptBytes <= 0 {
		c.ExcerptBytes = DefaultRecallExcerptBytes
	}
	return c
}

// querySchema is the JSON schema of the tool's arguments, the same in every dialect.
func querySchema() map[string]any {
	return map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"query"},
		"properties": map[string]any{
			"query": map[string]any{"type": "string", "description": recallQueryDescription},
		},
	}
}

// recaller runs the recall loop of the turns that offer the tool: what it needs of the server,
// given once (New).
type recaller struct {
	cfg           RecallConfig // defaults applied
	archive       archive.Store
	metrics       *metrics.Metrics
	events        *eventlog.Recorder
	log           *slog.Logger
	source        func(ctx context.Context, client, api string) eventlog.Source
	tenantOf      func(context.Context) string
	roundTrip     func(r *http.Request, target *url.URL, body []byte) (*http.Response, error)
	upstreamError func(d dialect) func(http.ResponseWriter, *http.Request, error)
}

// recallTurn is a turn that offers the recall tool.
type recallTurn struct {
	cfg          RecallConfig
	conversation string
	owners       owner.Set // whose segments in conversation the turn may read (readSet)
	client       string    // the client's kind, for the event log (runRecall sets it)
	api          string    // the route's dialect name, for the event log (runRecall sets it)
}

// recallConfig returns the recall settings of a turn and the archive conversation it searches,
// with the owners whose segments in it the turn may read, or ok false when recall does not apply:
// no archive, recall off, no conversation or owners. Whether the request leaves room for the tool
// (its tool choice, a tool of the same name) is its API's to say (turn.RecallAllowed).
func (rl *recaller) config(conversation string, owners owner.Set) (*recallTurn, bool) {
	cfg := rl.cfg
	if rl.archive == nil || cfg.Disabled || conversation == "" || len(owners) == 0 {
		return nil, false
	}
	return &recallTurn{cfg: cfg, conversation: conversation, owners: owners}, true
}

// recallSearch searches the archive and renders the excerpts for the model.
func (rl *recaller) search(ctx context.Context, rt *recallTurn, query string) string {
	if strings.TrimSpace(query) == "" {
		return "Empty query: call the tool again with the words to search for."
	}
	hits, err := rl.archive.Search(ctx, archive.Query{
		Text: query, Tenant: rl.tenantOf(ctx), Conversation: rt.conversation, Owners: rt.owners,
		Limit: rt.cfg.TopK, ExcerptBytes: rt.cfg.ExcerptBytes,
	})
	rl.metrics.Recall(err == nil, len(hits))
	if rl.events != nil {
		rl.events.Recall(rl.source(ctx, rt.client, rt.api), rt.conversation, query, hits, err)
	}
	if err != nil {
		rl.log.Warn("recall search failed", "err", err)
		return "The archive could not be searched just now; continue from the summary."
	}
	if len(hits) == 0 {
		return fmt.Sprintf("No archived history of this conversation matches %q.", query)
	}
	var b strings.Builder
	// The header is handoff.RecallHeader: a model that quotes this result puts it in the
	// conversation, and the archive recognises the quote by it and never returns it as history.
	fmt.Fprintf(&b, "%s matching %q, best first (excerpts archived together in conversation order):\n", handoff.RecallHeader, query)
	for i, h := range hits {
		fmt.Fprintf(&b, "\n[%d] archived %s, item %d:\n%s\n", i+1, h.CreatedAt.UTC().Format("2006-01-02 15:04"), h.ItemIndex, h.Excerpt)
	}
	return b.String()
}

// recallFailure is what went wrong with a round, for the dialect to render.
type recallFailure struct {
	err  error  // the round trip failed
	body []byte // with status: the upstream's error body
	// status is the upstream's HTTP status when it answered with an error.
	status int
	why    string // the upstream's answer cannot be used (for the client: what is wrong)
	cut    bool   // the stream broke off before its end
}

// fault is a failed round as compactd's own error in d: the upstream unreachable, its
// stream cut, or an answer compactd cannot pass on (compacted: this turn compacted, so the
// client is told its items are still good).
func (f recallFailure) fault(d dialect, compacted bool) *fault.Fault {
	switch {
	case f.err != nil:
		return upstreamUnavailable(d)
	case f.cut:
		return upstreamInterrupted()
	}
	return turn.UpstreamInvalid(d.Words(), compacted, f.why)
}

// runRecall runs a turn that offers the recall tool: up to MaxRounds hidden rounds, then the
// answer the client sees. r's context cancels every round; committed says compactd already sent
// the stream's headers (keep-alives while it compacted).
func (rl *recaller) run(w http.ResponseWriter, r *http.Request, rt *recallTurn, d turn.Recall, a dialect, upstream *url.URL, stream, committed bool) {
	rt.client, rt.api = eventlog.ClientKind(r.Header), apiName(a)
	if stream {
		rl.stream(w, r, rt, d, a, upstream, committed)
		return
	}
	var visible [][]byte
	for round := 0; ; round++ {
		last := round == rt.cfg.MaxRounds
		resp, err := rl.roundTrip(r, upstream, d.Request(last))
		if err != nil {
			rl.failed(w, r, a, d, recallFailure{err: err})
			return
		}
		if resp.StatusCode != http.StatusOK {
			relayStatus(w, resp)
			return
		}
		var data []byte
		why := "is an event stream, but the request was not streamed"
		if !relay.IsEventStream(resp.Header) {
			if data, why, err = relay.ReadJSON(resp); err != nil {
				return // the client went away
			}
		}
		resp.Body.Close()
		var items []turn.RecallItem
		if why == "" {
			items, why = d.JSONRound(data)
		}
		if why != "" {
			rl.log.Warn("upstream response not passed on: compactd cannot rewrite it", "api", apiName(a), "reason", why)
			rl.failed(w, r, a, d, recallFailure{why: why})
			return
		}
		calls := recallCalls(items)
		if len(calls) == 0 || last {
			data = d.FinalJSON(data, appendVisible(visible, items, len(items)))
			copyHeader(w.Header(), resp.Header) // the final round's (its request id, rate limits)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			_, _ = w.Write(data)
			return
		}
		visible = appendVisible(visible, items, firstTool(items))
		d.Answer(withoutClientCalls(items), rl.results(r.Context(), rt, calls))
	}
}

// relayStatus passes an upstream error answer on as it came (nothing was sent yet).
func relayStatus(w http.ResponseWriter, resp *http.Response) {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, relay.MaxJSON))
	resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(data)
}

func recallCalls(items []turn.RecallItem) []turn.RecallCall {
	var calls []turn.RecallCall
	for _, it := range items {
		if it.Call != nil {
			calls = append(calls, *it.Call)
		}
	}
	return calls
}

// firstTool is the index of the first tool call among items (len(items) without one).
func firstTool(items []turn.RecallItem) int {
	for i, it := range items {
		if it.Tool {
			return i
		}
	}
	return len(items)
}

// appendVisible appends items[:n] but the recall calls.
func appendVisible(visible [][]byte, items []turn.RecallItem, n int) [][]byte {
	for _, it := range items[:n] {
		if it.Call == nil {
			visible = append(visible, it.Raw)
		}
	}
	return visible
}

// withoutClientCalls drops the client's tool calls from a round that also called the recall
// tool: the client never gets them, so they have no results; the model is asked again, with the
// recall results in hand, and calls them again if it still needs them.
func withoutClientCalls(items []turn.RecallItem) []turn.RecallItem {
	out := make([]turn.RecallItem, 0, len(items))
	for _, it := range items {
		if !it.Tool || it.Call != nil {
			out = append(out, it)
		}
	}
	return out
}

func (rl *recaller) results(ctx context.Context, rt *recallTurn, calls []turn.RecallCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = rl.search(ctx, rt, c.Query)
	}
	return out
}

// copyHeader copies the headers of an upstream answer compactd rewrote (src has no hop-by-hop
// headers left: upstreamRoundTrip removed them as the ReverseProxy does); the length and coding
// of the upstream's body do not describe compactd's.
func copyHeader(dst, src http.Header) {
	for k, v := range src {
		switch k {
		case "Content-Length", "Content-Encoding":
			continue
		}
		dst[k] = v
	}
}

// heldEvent is an event held back until its round ends: a copy of its data (the reader's bytes
// are the next event's by then), and the edit that renumbers it.
type heldEvent struct {
	name    string
	data    []byte
	edit    relay.Splice
	renamed bool // edit applies
}

// streamRecall is runRecall for SSE. Each round's events are relayed as they arrive, renumbered
// so the client sees one ordinary response: the response opens once, the recall calls are
// dropped, and from a round's first tool call on its events are held until the round ends —
// dropped if the round called the recall tool (the model is asked again), relayed otherwise.
func (rl *recaller) stream(w http.ResponseWriter, r *http.Request, rt *recallTurn, d turn.Recall, a dialect, upstream *url.URL, committed bool) {
	rc := http.NewResponseController(w)
	headersSent := committed
	writePieces := func(bs [][]byte) bool {
		wrote := false
		for _, b := range bs {
			if len(b) == 0 {
				continue
			}
			if _, err := w.Write(b); err != nil {
				return false
			}
			wrote = true
		}
		return !wrote || rc.Flush() == nil
	}
	write := func(b []byte) bool { return writePieces([][]byte{b}) }
	var pieces [][]byte // the current event's, reused
	var edits []relay.Splice
	relayEvent := func(name string, data []byte, es []relay.Splice) bool {
		clear(pieces)
		pieces = d.Render(pieces[:0], name, data, es)
		return writePieces(pieces)
	}
	fail := func(f recallFailure) {
		if f.why != "" {
			rl.log.Warn("upstream response not passed on: compactd cannot rewrite it", "api", apiName(a), "reason", f.why)
		}
		if headersSent {
			write(d.ErrorEvents(f.fault(a, d.Compacted()), f.status, f.body))
			return
		}
		rl.failed(w, r, a, d, f)
	}
	var visible [][]byte
	injected := !d.Compacted()
	next := int64(0) // the client's index of the next visible unit
	if !injected {
		next = 1
	}
	for round := 0; ; round++ {
		last := round == rt.cfg.MaxRounds
		resp, err := rl.roundTrip(r, upstream, d.Request(last))
		if err != nil {
			if !errors.Is(err, context.Canceled) || r.Context().Err() == nil {
				fail(recallFailure{err: err})
			}
			return
		}
		if resp.StatusCode == http.StatusOK && !relay.IsEventStream(resp.Header) {
			resp.Body.Close()
			fail(recallFailure{why: "is JSON, but the request was streamed"})
			return
		}
		if resp.StatusCode != http.StatusOK {
			if !headersSent {
				relayStatus(w, resp)
				return
			}
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			fail(recallFailure{status: resp.StatusCode, body: data})
			return
		}
		if !headersSent {
			copyHeader(w.Header(), resp.Header)
			w.WriteHeader(http.StatusOK)
			headersSent = true
		}
		index := map[int64]int64{} // upstream index → the client's, for visible units
		hidden := map[int64]bool{}
		var held []heldEvent
		holding, holdFrom := false, next
		stopped, ok := false, true
		rd := sse.NewReaderSize(resp.Body, relay.MaxEvent)
		for ok && !stopped {
			ev, err := rd.Next()
			if errors.Is(err, sse.ErrEventTooLong) {
				resp.Body.Close()
				fail(recallFailure{why: "sent an event larger than the " + strconv.Itoa(relay.MaxEvent>>20) + " MiB compactd relays"})
				return
			}
			if err != nil || !ev.Terminated {
				break // the stream broke off (mid-event, perhaps): reported below
			}
			data, valid := relay.EventJSON(&ev)
			if len(data) == 0 || bytes.Equal(data, relay.DoneMarker) {
				// comments, keep-alives, [DONE]: the stream's own framing, which ends a Chat
				// Completions stream whose upstream sent no usage chunk (doneStopper).
				if ds, ok := d.(turn.DoneStopper); ok && len(data) > 0 && ds.DoneStops() {
					stopped = true
				}
				continue
			}
			if !valid {
				// A garbled event: never splice into it, end the stream instead.
				resp.Body.Close()
				fail(recallFailure{why: "sent an event that is not valid JSON"})
				return
			}
			e := d.Event(ev.Name, data)
			switch e.Kind {
			case turn.EvEnd:
			case turn.EvStop:
				stopped = true
			case turn.EvStart:
				if round == 0 {
					ok = relayEvent(ev.Name, e.Data, nil)
				}
			case turn.EvError:
				relayEvent(ev.Name, e.Data, nil)
				resp.Body.Close()
				return
			case turn.EvPass:
				ok = relayEvent(ev.Name, e.Data, nil)
			case turn.EvItem:
				if !injected {
					injected = true
					if ok = write(d.Prelude()); !ok {
						continue
					}
				}
				if e.Start {
					if e.Tool && !holding {
						holding, holdFrom = true, next
					}
					if e.Call {
						hidden[e.Index] = true
					} else if _, seen := index[e.Index]; !seen {
						index[e.Index] = next
						next++
					}
				}
				n, known := index[e.Index]
				if hidden[e.Index] || !known {
					continue // a recall call's, or of a unit that never opened
				}
				edit, renamed := d.Reindex(e.Data, n)
				if holding {
					held = append(held, heldEvent{ev.Name, bytes.Clone(e.Data), edit, renamed})
					continue
				}
				edits = edits[:0]
				if renamed {
					edits = append(edits, edit)
				}
				ok = relayEvent(ev.Name, e.Data, edits)
			}
		}
		resp.Body.Close()
		if !ok {
			return // the client went away
		}
		if !stopped {
			if r.Context().Err() == nil {
				fail(recallFailure{cut: true})
			}
			return
		}
		items, why := d.StreamRound()
		if why != "" {
			fail(recallFailure{why: why})
			return
		}
		calls := recallCalls(items)
		if len(calls) == 0 || last {
			if !injected {
				write(d.Prelude())
			}
			for i, h := range held {
				edits = edits[:0]
				if h.renamed {
					edits = append(edits, h.edit)
				}
				if !relayEvent(h.name, h.data, edits) {
					return
				}
				held[i] = heldEvent{} // written: its bytes may go
			}
			write(d.FinalStream(appendVisible(visible, items, len(items))))
			return
		}
		if holding {
			next = holdFrom
		}
		visible = appendVisible(visible, items, firstTool(items))
		d.Answer(withoutClientCalls(items), rl.results(r.Context(), rt, calls))
	}
}

// recallFailed answers a failed round over HTTP: an unreachable upstream as every upstream call's
// failure is answered, anything else as the fault it is.
func (rl *recaller) failed(w http.ResponseWriter, r *http.Request, a dialect, d turn.Recall, f recallFailure) {
	if f.err != nil {
		rl.upstreamError(a)(w, r, f.err)
		return
	}
	writeFault(w, a, f.fault(a, d.Compacted()))
}
