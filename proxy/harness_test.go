package proxy_test

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// harness is compactd in front of the fake upstream, with the real openai-go SDK as the client.
type harness struct {
	fake     *fakeupstream.Server
	ring     *crypto.Keyring
	srv      *proxy.Server
	proxyURL string
	upURL    string
	client   openai.Client
}

func testRing(t testing.TB, seed string, retired ...crypto.Key) *crypto.Keyring {
	t.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k.ID = seed
	r, err := crypto.NewKeyring(k, retired...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newHarness(t testing.TB, opts fakeupstream.Options, mutate func(*proxy.Config)) *harness {
	t.Helper()
	fake := fakeupstream.New(opts)
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	base, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	u, _ := url.Parse(base)
	sum, err := summarizer.New(summarizer.Config{BaseURL: base + "/v1", API: "responses"})
	if err != nil {
		t.Fatal(err)
	}
	counter := compact.NewCounter(compact.CounterOptions{})
	t.Cleanup(counter.Close)
	h := &harness{fake: fake, ring: testRing(t, "k1"), upURL: base}
	cfg := proxy.Config{
		Upstream:   u,
		Sealer:     h.ring,
		Summarizer: sum,
		Counter:    counter,
		KeepAlive:  time.Hour,
		Logger:     slog.New(slog.DiscardHandler),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	t.Cleanup(func() { closeServer(t, srv) }) // after ts.Close (cleanups run last first)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	h.proxyURL = ts.URL
	h.client = openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return h
}

// upstream returns the recorded requests of one kind ("responses", "summary", …).
func (h *harness) upstream(kind dialect.Name) []fakeupstream.Recorded {
	var out []fakeupstream.Recorded
	for _, r := range h.fake.Requests() {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// lastUpstreamInput is the input array of the last Responses request the upstream received.
func (h *harness) lastUpstreamInput(t *testing.T) []gjson.Result {
	t.Helper()
	reqs := h.upstream(dialect.Responses)
	if len(reqs) == 0 {
		t.Fatal("upstream received no Responses request")
	}
	return gjson.GetBytes(reqs[len(reqs)-1].Body, "input").Array()
}

// history builds a conversation of n user/assistant exchanges, each user message about
// wordsPerMsg words long, with a distinct marker so tests can tell which survived.
func history(n, wordsPerMsg int) []map[string]any {
	var items []map[string]any
	items = append(items, map[string]any{"type": "message", "role": "developer", "content": "You are a careful coding agent."})
	for i := 0; i < n; i++ {
		items = append(items,
			map[string]any{"type": "message", "role": "user", "content": marker("U", i) + " " + strings.Repeat("please refactor the parser ", wordsPerMsg/4)},
			map[string]any{"type": "message", "role": "assistant", "content": []map[string]any{{"type": "output_text", "text": marker("A", i) + " " + strings.Repeat("I changed parse.go line 42 ", wordsPerMsg/5)}}},
		)
	}
	return items
}

func marker(kind string, i int) string {
	return kind + "-MARK-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
