package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/sse"
)

// Recall gives the model its memory back. After a compaction, compactd offers the upstream model
// a function tool; when the model calls it, compactd searches the conversation's archive itself,
// answers with the best raw excerpts, and calls the upstream again. The client never sees these
// rounds — not in JSON, not in SSE — and the usage it gets is the sum of all of them.

// RecallConfig bounds the recall tool.
type RecallConfig struct {
	Disabled     bool   // no recall tool even when an archive is configured
	ToolName     string // default "compactd_recall"
	Description  string // default: defaultRecallDescription
	MaxRounds    int    // recall rounds per turn (default 3); the last round is offered no tool
	TopK         int    // excerpts per search (default 5)
	ExcerptBytes int    // bytes per excerpt (default 1200)
}

const defaultRecallDescription = "Search the verbatim history of this conversation from before it was compacted " +
	"(file contents, command output, error messages, exact values, earlier decisions). Use it whenever the " +
	"summary lacks a detail you need; prefer exact identifiers, paths, or error words as the query."

func (c RecallConfig) withDefaults() RecallConfig {
	if c.ToolName == "" {
		c.ToolName = "compactd_recall"
	}
	if c.Description == "" {
		c.Description = defaultRecallDescription
	}
	if c.MaxRounds <= 0 {
		c.MaxRounds = 3
	}
	if c.TopK <= 0 {
		c.TopK = 5
	}
	if c.ExcerptBytes <= 0 {
		c.ExcerptBytes = 1200
	}
	return c
}

// toolJSON is the Responses function tool definition.
func (c RecallConfig) toolJSON() []byte {
	b, _ := json.Marshal(map[string]any{
		"type": "function", "name": c.ToolName, "description": c.Description, "strict": true,
		"parameters": map[string]any{
			"type":                 "object",
			"additionalProperties": false,
			"required":             []string{"query"},
			"properties": map[string]any{
				"query": map[string]any{"type": "string", "description": "words to search for: identifiers, paths, error text, values"},
			},
		},
	})
	return b
}

// recallTurn is a turn that offers the recall tool.
type recallTurn struct {
	cfg          RecallConfig
	conversation string
	req          *api.ResponsesRequest
	items        [][]byte // the upstream input so far
	strip        bool
}

// recallFor returns the recall state for a turn, or nil when recall does not apply: no archive,
// recall off, no archived history for this conversation yet, previous_response_id chains, or a
// client that brings its own tool of the same name.
func (s *Server) recallFor(req *api.ResponsesRequest, prev *engine.Opened, c *compaction) *recallTurn {
	cfg := s.cfg.Recall.withDefaults()
	if s.cfg.Archive == nil || cfg.Disabled || req.PreviousResponseID != "" {
		return nil
	}
	conv := ""
	switch {
	case c != nil && c.Payload.Archive != nil:
		conv = c.Payload.Archive.Conversation
	case prev != nil && prev.Payload.Archive != nil:
		conv = prev.Payload.Archive.Conversation
	}
	if conv == "" {
		return nil
	}
	if req.Tools != nil {
		clash := false
		gjson.ParseBytes(req.Tools).ForEach(func(_, t gjson.Result) bool {
			clash = t.Get("name").Str == cfg.ToolName
			return !clash
		})
		if clash {
			return nil
		}
	}
	return &recallTurn{cfg: cfg, conversation: conv, req: req, strip: s.cfg.StripCodexFields}
}

// body renders the upstream request for the current round.
func (rt *recallTurn) body(withTool bool) []byte {
	out := rt.req.WithInput(rt.items, true)
	if rt.strip {
		out, _ = sjson.DeleteBytes(out, "client_metadata")
	}
	if withTool {
		out, _ = sjson.SetRawBytes(out, "tools.-1", rt.cfg.toolJSON())
	}
	return out
}

// isRecallCall reports whether an output item is a call of the recall tool.
func (rt *recallTurn) isRecallCall(item gjson.Result) bool {
	return item.Get("type").Str == "function_call" && item.Get("name").Str == rt.cfg.ToolName
}

// answer runs the searches a round asked for and appends the round's output and the tool
// results to the upstream input.
func (s *Server) answer(ctx context.Context, rt *recallTurn, output []gjson.Result) {
	for _, it := range output {
		rt.items = append(rt.items, []byte(it.Raw))
		if !rt.isRecallCall(it) {
			continue
		}
		query := gjson.Get(it.Get("arguments").Str, "query").Str
		result := s.recallSearch(ctx, rt, query)
		out := []byte(`{"type":"function_call_output","call_id":"","output":""}`)
		out, _ = sjson.SetBytes(out, "call_id", it.Get("call_id").Str)
		out, _ = sjson.SetBytes(out, "output", result)
		rt.items = append(rt.items, out)
	}
}

// recallSearch searches the archive and renders the excerpts for the model.
func (s *Server) recallSearch(ctx context.Context, rt *recallTurn, query string) string {
	if strings.TrimSpace(query) == "" {
		return "Empty query: call the tool again with the words to search for."
	}
	hits, err := s.cfg.Archive.Search(ctx, archive.Query{
		Text: query, Tenant: s.tenantOf(ctx), Conversation: rt.conversation,
		Limit: rt.cfg.TopK, ExcerptBytes: rt.cfg.ExcerptBytes,
	})
	s.metrics.recall(err == nil, len(hits))
	if err != nil {
		s.log.Warn("recall search failed", "err", err)
		return "The archive could not be searched just now; continue from the summary."
	}
	if len(hits) == 0 {
		return fmt.Sprintf("No archived history of this conversation matches %q.", query)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Verbatim excerpts from this conversation's archived history matching %q, best first:\n", query)
	for i, h := range hits {
		fmt.Fprintf(&b, "\n[%d] archived %s, item %d:\n%s\n", i+1, h.CreatedAt.UTC().Format("2006-01-02 15:04"), h.ItemIndex, h.Excerpt)
	}
	return b.String()
}

// usageSum adds Responses usage objects.
type usageSum struct{ input, cached, output, reasoning, total int64 }

func (u *usageSum) add(v gjson.Result) {
	u.input += v.Get("input_tokens").Int()
	u.cached += v.Get("input_tokens_details.cached_tokens").Int()
	u.output += v.Get("output_tokens").Int()
	u.reasoning += v.Get("output_tokens_details.reasoning_tokens").Int()
	u.total += v.Get("total_tokens").Int()
}

// apply writes the sum into the usage object at path of doc.
func (u *usageSum) apply(doc []byte, path string) []byte {
	for k, v := range map[string]int64{
		"input_tokens": u.input, "input_tokens_details.cached_tokens": u.cached, "output_tokens": u.output,
		"output_tokens_details.reasoning_tokens": u.reasoning, "total_tokens": u.total,
	} {
		doc, _ = sjson.SetBytes(doc, path+"."+k, v)
	}
	return doc
}

// hideTool removes the recall tool from the tools array at path: responses echo the request's
// tools, and the client must not learn of one it did not send.
func (rt *recallTurn) hideTool(doc []byte, path string) []byte {
	tools := gjson.GetBytes(doc, path)
	if !tools.IsArray() {
		return doc
	}
	kept := make([][]byte, 0, len(tools.Array()))
	found := false
	for _, t := range tools.Array() {
		if t.Get("name").Str == rt.cfg.ToolName && t.Get("type").Str == "function" {
			found = true
			continue
		}
		kept = append(kept, []byte(t.Raw))
	}
	if !found {
		return doc
	}
	return withOutput(doc, path, kept)
}

// withOutput replaces the output array at path with items.
func withOutput(doc []byte, path string, items [][]byte) []byte {
	arr := append([]byte{'['}, bytes.Join(items, []byte{','})...)
	arr = append(arr, ']')
	doc, _ = sjson.SetRawBytes(doc, path, arr)
	return doc
}

// forwardRecall runs a turn that offers the recall tool: up to MaxRounds hidden rounds, then the
// answer the client sees.
func (s *Server) forwardRecall(w http.ResponseWriter, r *http.Request, t *turn, rt *recallTurn, items [][]byte) {
	rt.items = items
	if t.stream {
		s.streamRecall(w, r, t, rt)
		return
	}
	var usage usageSum
	var visible [][]byte
	if t.item != nil {
		visible = append(visible, t.item)
	}
	for round := 0; ; round++ {
		last := round == rt.cfg.MaxRounds
		resp, err := s.upstreamRoundTrip(r, rt.body(!last))
		if err != nil {
			s.upstreamError(dialectOpenAI)(w, r, err)
			return
		}
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, maxJSONResponse))
			resp.Body.Close()
			copyHeader(w.Header(), resp.Header)
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(data)
			return
		}
		var data []byte
		why := "is an event stream, but the request was not streamed"
		if !isEventStream(resp.Header) {
			if data, why, err = readRewritable(resp); err != nil {
				return // the client went away
			}
		}
		resp.Body.Close()
		if why == "" && !gjson.GetBytes(data, "output").IsArray() {
			why = "has no output array"
		}
		if why != "" {
			s.log.Warn("upstream response not passed on: compactd cannot rewrite it", "api", "openai", "reason", why)
			invalidUpstream(dialectOpenAI, t.item != nil, why).write(w, dialectOpenAI)
			return
		}
		usage.add(gjson.GetBytes(data, "usage"))
		output := gjson.GetBytes(data, "output").Array()
		calls := 0
		for _, it := range output {
			if rt.isRecallCall(it) {
				calls++
			} else {
				visible = append(visible, []byte(it.Raw))
			}
		}
		if calls == 0 || last {
			data = withOutput(data, "output", visible)
			data = usage.apply(data, "usage")
			data = rt.hideTool(data, "tools")
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			_, _ = w.Write(data)
			return
		}
		s.answer(r.Context(), rt, output)
	}
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

// streamRecall is forwardRecall for SSE: each round's events are relayed as they arrive, except
// those of recall calls and the interim rounds' created/in_progress/completed events; output
// indices and sequence numbers are renumbered so the client sees one ordinary response.
func (s *Server) streamRecall(w http.ResponseWriter, r *http.Request, t *turn, rt *recallTurn) {
	rc := http.NewResponseController(w)
	var usage usageSum
	var visible [][]byte
	seq, base := 0, 0
	headersSent := t.committed
	emit := func(event string, data []byte) bool {
		data, _ = sjson.SetBytes(data, "sequence_number", seq)
		seq++
		if _, err := w.Write(sse.AppendEvent(nil, event, data)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	injected := t.item == nil
	inject := func() bool {
		injected = true
		if _, err := w.Write(compactionItemEvents(nil, t.itemID, t.item, 0, seq)); err != nil {
			return false
		}
		seq += 2
		visible = append(visible, t.item)
		base = 1
		return rc.Flush() == nil
	}
	for round := 0; ; round++ {
		last := round == rt.cfg.MaxRounds
		resp, err := s.upstreamRoundTrip(r, rt.body(!last))
		if err != nil {
			if headersSent {
				_, _ = w.Write(upstreamUnavailable(dialectOpenAI).openAI().SSE(seq, t.responseID))
				return
			}
			s.upstreamError(dialectOpenAI)(w, r, err)
			return
		}
		if resp.StatusCode == http.StatusOK && !isEventStream(resp.Header) {
			resp.Body.Close()
			e := invalidUpstream(dialectOpenAI, t.item != nil, "is JSON, but the request was streamed")
			if headersSent {
				_, _ = w.Write(e.openAI().SSE(seq, t.responseID))
				return
			}
			e.write(w, dialectOpenAI)
			return
		}
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if headersSent {
				_, _ = w.Write(upstreamErrorFromBody(resp.StatusCode, data).SSE(seq, t.responseID))
				return
			}
			copyHeader(w.Header(), resp.Header)
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(data)
			return
		}
		if !headersSent {
			copyHeader(w.Header(), resp.Header)
			w.WriteHeader(http.StatusOK)
			headersSent = true
		}
		hidden := map[int64]bool{}
		roundVisible := 0
		var final gjson.Result
		ok := true
		rd := sse.NewReaderSize(resp.Body, maxSSEEvent)
		for ok {
			ev, err := rd.Next()
			if errors.Is(err, sse.ErrEventTooLong) {
				_, _ = w.Write(invalidUpstream(dialectOpenAI, t.item != nil, "sent an event larger than the "+strconv.Itoa(maxSSEEvent>>20)+" MiB compactd relays").openAI().SSE(seq, t.responseID))
				resp.Body.Close()
				return
			}
			if err != nil || !ev.Terminated {
				break // the stream broke off (mid-event, perhaps): no final event, reported below
			}
			data, valid := eventJSON(&ev)
			if len(data) == 0 || bytes.Equal(data, doneMarker) {
				continue
			}
			event := ev.Name
			if !valid {
				// A garbled event: never splice into it, end the stream instead.
				_, _ = w.Write(invalidUpstream(dialectOpenAI, t.item != nil, "sent an event that is not valid JSON").openAI().SSE(seq, t.responseID))
				resp.Body.Close()
				return
			}
			typ := gjson.GetBytes(data, "type").Str
			if t.responseID == "" {
				if id := gjson.GetBytes(data, "response.id"); id.Exists() {
					t.responseID = id.Str
				}
			}
			switch typ {
			case "response.created", "response.in_progress":
				if round == 0 {
					ok = emit(event, rt.hideTool(data, "response.tools"))
				}
				continue
			case "response.completed", "response.incomplete":
				final = gjson.ParseBytes(append([]byte(nil), data...))
				ok = false // handled after the loop
				continue
			case "error", "response.failed":
				emit(event, rt.hideTool(data, "response.tools"))
				resp.Body.Close()
				return
			}
			if !injected {
				if ok = inject(); !ok {
					break
				}
			}
			oi := gjson.GetBytes(data, "output_index")
			if typ == "response.output_item.added" && rt.isRecallCall(gjson.GetBytes(data, "item")) {
				hidden[oi.Int()] = true
			}
			if oi.Exists() {
				if hidden[oi.Int()] {
					continue
				}
				below := 0
				for h := range hidden {
					if h < oi.Int() {
						below++
					}
				}
				data, _ = sjson.SetBytes(data, "output_index", int64(base)+oi.Int()-int64(below))
				if typ == "response.output_item.added" {
					roundVisible++
				}
			}
			ok = emit(event, data)
		}
		resp.Body.Close()
		if !final.Exists() {
			if r.Context().Err() == nil {
				_, _ = w.Write(upstreamInterrupted().openAI().SSE(seq, t.responseID))
			}
			return
		}
		usage.add(final.Get("response.usage"))
		output := final.Get("response.output").Array()
		calls := 0
		for _, it := range output {
			if rt.isRecallCall(it) {
				calls++
			} else {
				visible = append(visible, []byte(it.Raw))
			}
		}
		if calls == 0 || last {
			if !injected {
				inject()
			}
			data := withOutput([]byte(final.Raw), "response.output", visible)
			data = usage.apply(data, "response.usage")
			data = rt.hideTool(data, "response.tools")
			emit(gjson.GetBytes(data, "type").Str, data)
			return
		}
		base += roundVisible
		s.answer(r.Context(), rt, output)
	}
}
