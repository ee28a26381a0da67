package proxy_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// eventRec is an EventSink that keeps what the Server writes.
type eventRec struct {
	mu  sync.Mutex
	evs []archive.Event
}

func (r *eventRec) Append(_ context.Context, evs []archive.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, evs...)
	return nil
}

// wait returns the events once one of each kind has been written (the log is written in the
// background).
func (r *eventRec) wait(t *testing.T, kinds ...string) []archive.Event {
	t.Helper()
	for range 500 {
		r.mu.Lock()
		evs := slices.Clone(r.evs)
		r.mu.Unlock()
		all := true
		for _, k := range kinds {
			all = all && slices.ContainsFunc(evs, func(e archive.Event) bool { return e.Kind == k })
		}
		if all {
			return evs
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the event log never held all of %q", kinds)
	return nil
}

// Every event of a turn names the route's dialect by its one name (internal/dialect): the
// compaction and the recall search of a Chat Completions turn are both "chat" — the recall
// event took the OpenAI upstream's name, so the console listed a Chat conversation under two
// APIs — and a Responses turn's are "responses".
func TestEventLogNamesTheDialect(t *testing.T) {
	t.Run("chat", func(t *testing.T) {
		rec := &eventRec{}
		h := newHarness(t, fakeupstream.Options{Answer: chatAnswerPort}, withArchive(t, func(c *proxy.Config) {
			chatPolicy(2000)(c)
			c.Events = rec
		}))
		if _, err := sendChat(t, h, context.Background(), chatParams(chatRecallHistory("Which port?")), false, false, chatRecallSession); err != nil {
			t.Fatal(err)
		}
		checkEventAPIs(t, rec.wait(t, archive.EventCompaction, archive.EventRecall), dialect.Chat)
	})
	t.Run("responses", func(t *testing.T) {
		rec := &eventRec{}
		h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) { c.Events = rec }))
		next := compactThenAsk(t, h)
		if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next)); err != nil {
			t.Fatal(err)
		}
		checkEventAPIs(t, rec.wait(t, archive.EventCompaction, archive.EventRecall), dialect.Responses)
	})
}

func checkEventAPIs(t *testing.T, evs []archive.Event, want dialect.Name) {
	t.Helper()
	for _, e := range evs {
		if e.API != string(want) {
			t.Errorf("%s event: API %q, want %q", e.Kind, e.API, want)
		}
	}
}
