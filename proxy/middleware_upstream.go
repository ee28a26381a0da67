package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact/summarizer"
	dialectname "github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
)

// instrumentedTransport wraps Config.Transport: it times every upstream round trip (to response
// headers, then every body read), adds that waiting time to the request's state, counts the
// round trip by status class, and for model turns records the GenAI "chat" operation with the
// token usage the upstream reported.
type instrumentedTransport struct {
	next http.RoundTripper
	m    *metrics
}

func (t *instrumentedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st := stateFrom(req.Context())
	upstream := "openai"
	if st != nil {
		upstream = st.upstream
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	d := time.Since(start)
	st.addUpstream(d)
	switch {
	case err == nil:
		t.m.upstreamRoundTrip(upstream, resp.StatusCode, d.Seconds())
	case req.Context().Err() != nil:
		// The client went away: not the upstream's failure.
		t.m.upstreamCanceled(upstream, d.Seconds())
	default:
		t.m.upstreamRoundTrip(upstream, 0, d.Seconds())
	}
	if err != nil {
		return nil, err
	}
	var ub *upstreamBody
	if st != nil && st.upstreamBodyUsed.CompareAndSwap(false, true) {
		ub = &st.upstreamBody // the request's first round trip (most have one): no allocation
	} else {
		ub = &upstreamBody{}
	}
	ub.rc, ub.st, ub.m, ub.start, ub.provider = resp.Body, st, t.m, start, upstream
	if t.m != nil && isModelTurn(req) {
		ub.turn = true
		ub.model = st.model()
		if resp.StatusCode/100 == 2 {
			ub.sse = relay.IsEventStream(resp.Header)
			ub.scan = true
		}
	}
	resp.Body = ub
	return resp, nil
}

// CloseIdleConnections passes through, so http.Client.CloseIdleConnections still works.
func (t *instrumentedTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// isModelTurn reports whether req asks the upstream model for a turn (a GenAI "chat" operation).
func isModelTurn(req *http.Request) bool {
	if req.Method != http.MethodPost {
		return false
	}
	p := req.URL.Path
	return strings.HasSuffix(p, "/responses") || strings.HasSuffix(p, "/messages") || strings.HasSuffix(p, "/chat/completions")
}

// usageCap bounds what upstreamBody keeps to find the usage: one SSE event. Larger events pass
// through untouched and report no tokens.
const usageCap = 8 << 20

// usageObjectCap bounds the usage object a JSON body's scan keeps (they are a few hundred bytes).
const usageObjectCap = 64 << 10

// usageScan finds the top-level "usage" object of a JSON body as the body streams past, keeping
// only that object: a response is never buffered to read its token counts. It is a byte-level
// state machine (strings, escapes, nesting depth as a counter), so it is linear in the body and
// bounded in depth by construction; the object it keeps is validated before gjson reads it.
type usageScan struct {
	depth      int
	inStr, esc bool
	prev       byte                   // the last ',', ':' or '{' at depth 1 (0 after a nested value closed)
	isKey      bool                   // the string being read is a key of the top-level object
	key        [len("usage") + 1]byte // the head of the key being read: enough to tell "usage" apart
	keyLen     int
	keyIsUsage bool // the last top-level key read was "usage"
	capturing  bool
	obj        []byte
	done       bool
}

func (u *usageScan) found() bool { return u.done && u.obj != nil }

// write scans p; it reports true once the scan is over (usage found, or given up).
func (u *usageScan) write(p []byte) bool {
	if u.done {
		return true
	}
	start := -1 // where the usage object starts in p, when capturing
	if u.capturing {
		start = 0
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if u.inStr {
			switch {
			case u.esc:
				u.esc = false
			case c == '\\':
				u.esc = true
			case c == '"':
				u.inStr = false
				if u.isKey {
					u.keyIsUsage = string(u.key[:u.keyLen]) == "usage"
					u.isKey = false
				}
				continue
			}
			if u.isKey && u.keyLen < len(u.key) {
				u.key[u.keyLen] = c
				u.keyLen++
			}
			continue
		}
		switch c {
		case '"':
			u.inStr = true
			if u.depth == 1 && (u.prev == '{' || u.prev == ',') {
				u.isKey, u.keyLen = true, 0
			}
		case '{', '[':
			if u.depth == 1 && u.prev == ':' && u.keyIsUsage && c == '{' {
				u.capturing, start = true, i
			}
			u.depth++
			if u.depth == 1 {
				if c != '{' {
					u.done = true // not an object: no usage to find
					return true
				}
				u.prev = '{'
			}
		case '}', ']':
			u.depth--
			if u.depth == 1 {
				u.prev = 0
				if u.capturing {
					u.capturing, u.done = false, true
					if len(u.obj)+i+1-start > usageObjectCap {
						u.obj = nil
						return true
					}
					u.obj = append(u.obj, p[start:i+1]...)
					return true
				}
			}
			if u.depth <= 0 {
				u.done = true // the end of the body's object: no usage in it
				return true
			}
		case ',', ':':
			if u.depth == 1 {
				u.prev = c
				if c == ',' {
					u.keyIsUsage = false
				}
			}
		}
	}
	if u.capturing {
		if len(u.obj)+len(p)-start > usageObjectCap {
			u.done, u.obj, u.capturing = true, nil, false
			return true
		}
		u.obj = append(u.obj, p[start:]...)
	}
	return false
}

// upstreamBody times reads of an upstream response body (compactd waiting on the upstream) and,
// for model turns, finds the usage in it: the "usage" of a JSON body, or of the SSE events that
// carry one (response.completed, message_start, message_delta, the last chat chunk).
type upstreamBody struct {
	rc       io.ReadCloser
	st       *reqState
	m        *metrics
	start    time.Time
	provider string
	model    string

	turn, scan, sse bool
	json            usageScan    // the JSON body's top-level usage, found as it passes
	events          *sse.Scanner // the SSE events, as they pass
	in, out         int64

	once sync.Once
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	t := time.Now()
	n, err := b.rc.Read(p)
	b.st.addUpstream(time.Since(t))
	if b.scan && n > 0 {
		b.feed(p[:n])
	}
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	err := b.rc.Close()
	b.finish(false)
	return err
}

func (b *upstreamBody) feed(p []byte) {
	if b.sse {
		if b.events == nil {
			b.events = sse.NewScanner(usageCap, b.event)
		}
		_, _ = b.events.Write(p)
		return
	}
	if b.json.write(p) {
		b.scan = false // found it, or never will: stop looking
	}
}

// event looks at one SSE event for usage.
func (b *upstreamBody) event(ev *sse.Event) {
	if bytes.Contains(ev.Data, []byte(`"usage"`)) {
		b.usage(ev.Data)
	}
}

// usage takes the token counts from doc's usage object; doc is checked for validity and depth
// before gjson walks it.
func (b *upstreamBody) usage(doc []byte) {
	if jsonx.Valid(doc) != nil {
		return
	}
	for _, path := range []string{"response.usage", "message.usage", "usage"} {
		u := gjson.GetBytes(doc, path)
		if !u.IsObject() {
			continue
		}
		b.count(u)
		return
	}
}

// count takes the token counts from a usage object.
func (b *upstreamBody) count(u gjson.Result) {
	{
		in := u.Get("input_tokens").Int() + u.Get("cache_read_input_tokens").Int() + u.Get("cache_creation_input_tokens").Int()
		if in == 0 {
			in = u.Get("prompt_tokens").Int()
		}
		out := u.Get("output_tokens").Int()
		if out == 0 {
			out = u.Get("completion_tokens").Int()
		}
		// Anthropic reports input in message_start and cumulative output in message_delta.
		b.in, b.out = max(b.in, in), max(b.out, out)
	}
}

// finish records the GenAI chat operation once: at the end of the body or when the proxy closes
// it (client gone, rewrite finished).
func (b *upstreamBody) finish(eof bool) {
	b.once.Do(func() {
		if !b.turn {
			return
		}
		if eof && !b.sse && b.json.found() && jsonx.Valid(b.json.obj) == nil {
			b.count(gjson.ParseBytes(b.json.obj))
		}
		if eof && b.events != nil {
			b.events.Flush() // a last event without its blank line still counts
		}
		b.json, b.events = usageScan{}, nil
		b.m.genAI("chat", b.provider, b.model, time.Since(b.start).Seconds(), b.in, b.out)
	})
}

// instrumentedSummarizer times each summarisation, adds the time to the request's state and
// records latency, tokens, outcome and the GenAI "compaction" operation. Decorating the interface
// keeps the engine free of metrics code.
type instrumentedSummarizer struct {
	next summarizer.Summarizer
	m    *metrics
	// provider is the GenAI provider label of the summariser's wire API: "anthropic" for the
	// Messages API, "openai" for the others (and a Summarizer that does not say).
	provider string
	live     *liveStats // the console's latency chart (stats.go)
}

func newInstrumentedSummarizer(next summarizer.Summarizer, m *metrics, live *liveStats) instrumentedSummarizer {
	provider := "openai"
	if summarizer.APIOf(next) == dialectname.Messages {
		provider = "anthropic"
	}
	return instrumentedSummarizer{next: next, m: m, provider: provider, live: live}
}

func (s instrumentedSummarizer) Summarize(ctx context.Context, req summarizer.Request) (summarizer.Result, error) {
	start := time.Now()
	res, err := s.next.Summarize(ctx, req)
	d := time.Since(start)
	stateFrom(ctx).addSummariser(d)
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, summarizer.ErrNothingToSummarize):
		outcome = "nothing"
	case errors.Is(err, context.Canceled) || ctx.Err() != nil && !errors.Is(err, summarizer.ErrUnavailable):
		outcome = "canceled"
	default:
		outcome = "failed"
	}
	s.m.summarised(outcome, d.Seconds(), res.Usage.InputTokens, res.Usage.OutputTokens, res.Calls)
	if outcome == "ok" || outcome == "failed" {
		s.live.summarised(d, outcome == "failed")
		model := res.Model
		if model == "" {
			model = req.Model
		}
		s.m.genAI("compaction", s.provider, model, d.Seconds(), res.Usage.InputTokens, res.Usage.OutputTokens)
	}
	return res, err
}
