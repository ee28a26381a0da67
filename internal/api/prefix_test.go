package api

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fixtures"
	"github.com/compactd/compactd/internal/jsonx"
)

// The resumed skims (Parse*From) are held to the full skims: for any body that begins with the
// bytes a Prefix was taken from, the resumed skim gives exactly what the full skim gives — the
// same request, or the same refusal. That is the whole contract of the prefix cache: what
// compactd decides from a resumed skim is what it would have decided from the whole body, so
// the upstream reads what compactd checked (duplicates, depth, UTF-8, misplaced compactions in
// the new tail are still found).

// prefixDialects are the three skims, each run full and resumed on one body.
var prefixDialects = []struct {
	name string
	// full skims body from the start; resumed from p. Both return a comparable view (the
	// request with its private backing buffers cleared) and the refusal, and the Prefix to
	// resume from next (nil on a refusal).
	full    func(body []byte) (any, *Prefix, error)
	resumed func(body []byte, p *Prefix) (any, *Prefix, error)
}{
	{"responses",
		func(b []byte) (any, *Prefix, error) { return responsesView(ParseResponsesRequest(b)) },
		func(b []byte, p *Prefix) (any, *Prefix, error) { return responsesView(ParseResponsesFrom(b, p)) }},
	{"messages",
		func(b []byte) (any, *Prefix, error) { return messagesView(ParseMessagesRequest(b)) },
		func(b []byte, p *Prefix) (any, *Prefix, error) { return messagesView(ParseMessagesFrom(b, p)) }},
	{"chat",
		func(b []byte) (any, *Prefix, error) { return chatView(ParseChatRequest(b)) },
		func(b []byte, p *Prefix) (any, *Prefix, error) { return chatView(ParseChatFrom(b, p)) }},
}

func responsesView(r *ResponsesRequest, err error) (any, *Prefix, error) {
	if err != nil {
		return nil, nil, err
	}
	v := *r
	v.itemBuf, v.from, v.table = [8]Item{}, nil, nil
	return v, r.Prefix(), nil
}

func messagesView(r *MessagesRequest, err error) (any, *Prefix, error) {
	if err != nil {
		return nil, nil, err
	}
	v := *r
	v.blockBuf, v.from = nil, nil
	return v, r.Prefix(), nil
}

func chatView(r *ChatRequest, err error) (any, *Prefix, error) {
	if err != nil {
		return nil, nil, err
	}
	v := *r
	v.from = nil
	return v, r.Prefix(), nil
}

// sameSkim fails t when the resumed skim of body from p differs from the full skim.
func sameSkim(t *testing.T, d int, body []byte, p *Prefix) {
	t.Helper()
	dl := prefixDialects[d]
	want, wantP, wantErr := dl.full(body)
	got, gotP, gotErr := dl.resumed(body, p)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("%s: full skim error %v, resumed %v\nbody %.500q", dl.name, wantErr, gotErr, body)
	}
	for _, kind := range []error{ErrInvalidJSON, ErrTooDeep, ErrDuplicateMember, ErrMisplacedCompaction, ErrShape} {
		if errors.Is(wantErr, kind) != errors.Is(gotErr, kind) {
			t.Fatalf("%s: full skim error kind %v, resumed %v", dl.name, wantErr, gotErr)
		}
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%s: resumed skim differs from the full skim\nfull    %.2000v\nresumed %.2000v\nbody %.500q", dl.name, fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", got), body)
	}
	if !reflect.DeepEqual(prefixContent(wantP), prefixContent(gotP)) {
		t.Fatalf("%s: the next Prefix differs\nfull    %+v\nresumed %+v", dl.name, prefixContent(wantP), prefixContent(gotP))
	}
	for _, p := range []*Prefix{wantP, gotP} {
		if p != nil && p.Size() < p.minSize() {
			t.Fatalf("%s: Size %d counts less than the %d bytes the Prefix holds", dl.name, p.Size(), p.minSize())
		}
	}
}

// prefixContent is what p says of a body: its fields but the memory it takes (Size, and the
// capacity past its tables that a successor takes over).
func prefixContent(p *Prefix) any {
	if p == nil {
		return nil
	}
	type content struct {
		Kind       prefixKind
		First, End int
		Items      []prefixItem
		Names      []string
		Blocks     []prefixBlock
		TooMany    bool
		NameBytes  int
	}
	return content{p.kind, p.first, p.end, slices.Clip(p.items), slices.Clip(p.names), slices.Clip(p.blocks), p.tooMany, p.nameBytes}
}

// minSize is the least p holds: its tables at their length.
func (p *Prefix) minSize() int {
	return sizeOfPrefix + len(p.items)*sizeOfPrefixItem + len(p.blocks)*sizeOfPrefixBlock + p.nameBytes
}

// resumeCase skims a in full, takes its Prefix and skims b = a[:End] + tail both ways. It
// returns false when a is refused or has no prefix (nothing to resume from).
func resumeCase(t *testing.T, d int, a, tail []byte) bool {
	t.Helper()
	_, p, err := prefixDialects[d].full(a)
	if err != nil || p == nil {
		return false
	}
	b := append(bytes.Clone(a[:p.End()]), tail...)
	sameSkim(t, d, b, p)
	return true
}

// Bodies of each dialect with a tail that closes them, and tails that must be refused or read the
// same either way: duplicates after the array, a compaction where none may be, invalid UTF-8,
// depth, a second array member, trailing garbage.
var (
	prefixBodies = [][]string{
		{ // responses
			`{"model":"gpt-5","instructions":"be brief","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","call_id":"c1","name":"sh","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"tools":[{"type":"function","name":"sh"}],"stream":true}`,
			`{"input":[{"role":"user","content":"a"},{"type":"compaction","encrypted_content":"x"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]}],"context_management":[{"type":"compaction","compact_threshold":1000}]}`,
		},
		{ // messages
			`{"model":"claude","max_tokens":10,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t1","name":"sh","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"}]}]}],"tools":[{"name":"sh","input_schema":{}}],"stream":true}`,
			`{"messages":[{"role":"user","content":"a\u2028b"},{"role":"assistant","content":[{"type":"compaction","content":"sum"}]},{"role":"user","content":"c\\n"}],"context_management":{"edits":[{"type":"compact_20260112"}]}}`,
		},
		{ // chat
			`{"model":"gpt-4o","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"sh","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"tools":[{"type":"function","function":{"name":"sh"}}],"stream":true,"stream_options":{"include_usage":true}}`,
		},
	}
	prefixTails = []string{
		`]}`,
		` ] , "stream" : false }`,
		`,{"role":"user","content":"more"}]}`,
		`,{"type":"message","role":"user","content":[{"type":"input_text","text":"more"}]},{"type":"function_call_output","call_id":"c2","output":"done"}],"tools":[]}`,
		`,{"role":"user","content":[{"type":"text","text":"x"},{"type":"compaction","content":"s"}]}]}`,
		`,{"type":"compaction","encrypted_content":"y"}]}`,
		`,{"type":"compaction_trigger"}]}`,
		`,{"role":"user","role":"assistant","content":"x"}]}`,
		`,{"type":"message","content":[{"type":"compaction"}]}]}`,
		`],"model":"a","model":"b"}`,
		`],"input":[],"messages":[]}`,
		`,{"role":"user","content":"` + "\xff" + `"}]}`,
		`,` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `]}`,
		`,{"role":"user","content":[` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `]}]}`,
		`]} trailing`,
		`]`,
		``,
		`,]}`,
		`,{"role":"user","content":"x"}]`,
		`],"tool_choice":{"type":"function","name":"a","name":"b"}}`,
		`,{"role":"tool","content":5}]}`,
		`],"stream_options":{"include_usage":true,"include_usage":false}}`,
	}
)

func TestPrefixResumeMatchesFullSkim(t *testing.T) {
	n := 0
	for d := range prefixDialects {
		for _, a := range prefixBodies[d] {
			for _, tail := range prefixTails {
				if resumeCase(t, d, []byte(a), []byte(tail)) {
					n++
				}
			}
		}
	}
	// The real captures, resumed with every tail and with themselves (a retry: the whole body).
	names, bodies := fixtures.CodexAll()
	for i, b := range bodies {
		b = []byte(gjson.GetBytes(b, "body").Raw)
		_, p, err := prefixDialects[0].full(b)
		if err != nil || p == nil {
			t.Fatalf("%s: no prefix to resume from (%v)", names[i], err)
		}
		sameSkim(t, 0, b, p)
		for _, tail := range prefixTails {
			resumeCase(t, 0, b, []byte(tail))
			n++
		}
	}
	cc := fixtures.ClaudeCode("compaction_request.json")
	if !resumeCase(t, 1, cc, []byte(`]}`)) {
		t.Fatal("the Claude Code capture gave no prefix")
	}
	if n < 100 {
		t.Fatalf("only %d resumed cases ran", n)
	}
}

// TestPrefixResumeSkipsTheKnownItems is the point of the exercise: the resumed skim takes the
// remembered items unread. A prefix whose remembered bytes are not what the body holds — which
// the cache's MAC rules out — is believed, so the resumed skim reads the stale kinds: this shows
// the items really were not walked again (and why the MAC is what makes resuming safe).
func TestPrefixResumeSkipsTheKnownItems(t *testing.T) {
	a := []byte(`{"input":[{"type":"message","role":"user","content":"aaaa"},{"type":"message","role":"user","content":"bbbb"}]}`)
	r, err := ParseResponsesRequest(a)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Prefix()
	if p.Len() != 2 || p.End() != len(a)-2 {
		t.Fatalf("prefix of %d items ending at %d, want 2 ending at %d", p.Len(), p.End(), len(a)-2)
	}
	// Same length and layout, but the second item is a compaction in the new body.
	b := []byte(`{"input":[{"type":"message","role":"user","content":"aaaa"},{"type":"compaction","encrypted_content":"bbbbb"}]}`)
	if len(b) != len(a) {
		t.Fatal("test bodies must have the same layout")
	}
	got, err := ParseResponsesFrom(b, p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Compaction != -1 || got.Items[1].Type != "message" {
		t.Fatalf("resumed skim re-read the remembered items: compaction %d, type %q", got.Compaction, got.Items[1].Type)
	}
	if full, _ := ParseResponsesRequest(b); full.Compaction != 1 {
		t.Fatalf("full skim: compaction %d, want 1", full.Compaction)
	}
}

// TestPrefixHoldsNoBody: a Prefix's names are interned or copied, never the body's bytes.
func TestPrefixHoldsNoBody(t *testing.T) {
	body := []byte(`{"input":[{"type":"my_custom_item"},{"type":"message","role":"someone","content":"x"}]}`)
	r, err := ParseResponsesRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Prefix()
	for i := range body {
		body[i] = 'X' // the body is reused for something else
	}
	if p.name(p.items[0].typ) != "my_custom_item" || p.name(p.items[1].role) != "someone" || p.name(p.items[1].typ) != "message" {
		t.Fatalf("prefix names changed with the body: %+v", p.items)
	}
	if p.Size() < sizeOfPrefix+2*sizeOfPrefixItem+len("my_custom_item")+len("someone") {
		t.Fatalf("Size %d does not count the items and the copied names", p.Size())
	}
}

// TestPrefixResumeOnlyWhereItBegan: a Prefix of another dialect, or one whose array began
// elsewhere, is not resumed from (the skim reads the body in full).
func TestPrefixResumeOnlyWhereItBegan(t *testing.T) {
	a := []byte(`{"input":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"a"}]}`)
	r, _ := ParseResponsesRequest(a)
	p := r.Prefix()
	shifted := append([]byte(`{"x":1,`), a[1:]...)
	sameSkim(t, 0, shifted, p)
	if m, err := ParseMessagesFrom(a, p); err != nil || len(m.Messages) != 1 {
		t.Fatalf("a Responses prefix resumed a Messages skim: %v %+v", err, m)
	}
	if (*Prefix)(nil).End() != 0 || (*Prefix)(nil).Size() != 0 || (*Prefix)(nil).Len() != 0 {
		t.Fatal("a nil Prefix must be empty")
	}
}

// FuzzPrefixResume: for any body the full skim accepts with a prefix, and any tail after that
// prefix, the resumed skim equals the full skim. Run: go test ./internal/api -run '^$' -fuzz
// '^FuzzPrefixResume$' -fuzztime 60s.
func FuzzPrefixResume(f *testing.F) {
	for d := range prefixDialects {
		for _, a := range prefixBodies[d] {
			for _, tail := range prefixTails {
				f.Add(uint8(d), []byte(a), []byte(tail))
			}
		}
	}
	_, bodies := fixtures.CodexAll()
	for _, b := range bodies {
		f.Add(uint8(0), []byte(gjson.GetBytes(b, "body").Raw), []byte(`,{"role":"user","content":"more"}]}`))
	}
	f.Fuzz(func(t *testing.T, d uint8, a, tail []byte) {
		if len(a) > 1<<20 || len(tail) > 1<<16 {
			return
		}
		resumeCase(t, int(d)%len(prefixDialects), a, tail)
		// And a chain: resume from the resumed skim's prefix on a second tail.
		dl := prefixDialects[int(d)%len(prefixDialects)]
		_, p, err := dl.full(a)
		if err != nil || p == nil {
			return
		}
		b := append(bytes.Clone(a[:p.End()]), tail...)
		if _, p2, err := dl.resumed(b, p); err == nil && p2 != nil {
			c := append(bytes.Clone(b[:p2.End()]), `]}`...)
			sameSkim(t, int(d)%len(prefixDialects), c, p2)
		}
	})
}

// BenchmarkPrefixResume: the full skim of a 2 MB agent body against the resumed skim of the
// same body plus one new item.
func BenchmarkPrefixResume(b *testing.B) {
	body := benchAgentBody(2 << 20)
	r, err := ParseResponsesRequest(body)
	if err != nil {
		b.Fatal(err)
	}
	p := r.Prefix()
	next := append(bytes.Clone(body[:p.End()]), `,{"type":"function_call_output","call_id":"new","output":"`+strings.Repeat("log line\\n", 2000)+`"}]}`...)
	if jsonx.Valid(next) != nil {
		b.Fatal("bench body is not valid JSON")
	}
	b.Run("full", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		for b.Loop() {
			if _, err := ParseResponsesRequest(next); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("resumed", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		for b.Loop() {
			if _, err := ParseResponsesFrom(next, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prefix", func(b *testing.B) {
		r, _ := ParseResponsesFrom(next, p)
		for b.Loop() {
			_ = r.Prefix()
		}
	})
}

// benchAgentBody is a Responses body of about size bytes of tool calls and outputs.
func benchAgentBody(size int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"model":"gpt-5","instructions":"` + strings.Repeat("You are a coding agent. ", 400) + `","input":[`)
	for i := 0; sb.Len() < size; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"type":"function_call","call_id":"c%d","name":"shell","arguments":"{\"cmd\":[\"go\",\"test\",\"./...\"]}"},`, i)
		fmt.Fprintf(&sb, `{"type":"function_call_output","call_id":"c%d","output":"%s"}`, i, strings.Repeat(`ok  \tgithub.com/x/y\t0.1s\n`, 100))
	}
	sb.WriteString(`],"tools":[{"type":"function","name":"shell"}],"stream":false}`)
	return []byte(sb.String())
}

// TestPrefixBoundsOwnNames: a body with more distinct unknown item types than a Prefix keeps
// gets no Prefix (the skim itself is unaffected), so naming items stays bounded work.
func TestPrefixBoundsOwnNames(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"input":[`)
	for i := range maxPrefixNames + 1 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"type":"custom_%d"}`, i)
	}
	sb.WriteString(`]}`)
	r, err := ParseResponsesRequest([]byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	if p := r.Prefix(); p != nil {
		t.Fatalf("a Prefix of %d own names was made", len(p.names))
	}
	r2, _ := ParseResponsesRequest([]byte(`{"input":[{"type":"custom_1"},{"type":"custom_1"},{"type":"custom_2"}]}`))
	if p := r2.Prefix(); p == nil || len(p.names) != 2 {
		t.Fatalf("repeated names must be stored once: %+v", p)
	}
}

// A conversation's Prefixes share one growing table (extend): the first successor of a Prefix
// appends past its end. A second successor of the same Prefix (a forked conversation, a retried
// request) must copy, or the two would write the same memory; each Prefix of the chain and of
// every fork must still describe its own body once all of them are made.
func TestPrefixForksKeepTheirOwnTables(t *testing.T) {
	item := func(s string) string { return `,{"role":"user","content":"` + s + `"}` }
	for d := range prefixDialects {
		dl := prefixDialects[d]
		base := []byte(prefixBodies[d][0])
		_, p, err := dl.full(base)
		if err != nil || p == nil {
			t.Fatalf("%s: %v", dl.name, err)
		}
		type made struct {
			body []byte
			p    *Prefix
		}
		var all []made
		body := base
		for k := range 12 {
			next := func(s string) made {
				b := append(append(bytes.Clone(body[:p.End()]), item(s)...), `]}`...)
				_, q, err := dl.resumed(b, p)
				if err != nil || q == nil {
					t.Fatalf("%s: turn %d: %v", dl.name, k, err)
				}
				return made{b, q}
			}
			main, fork := next(fmt.Sprintf("turn %d", k)), next(fmt.Sprintf("fork %d, longer", k))
			// The fork goes on a turn of its own, appending to the copy it made.
			b := append(append(bytes.Clone(fork.body[:fork.p.End()]), item("after the fork")...), `]}`...)
			_, q, err := dl.resumed(b, fork.p)
			if err != nil || q == nil {
				t.Fatalf("%s: turn %d after the fork: %v", dl.name, k, err)
			}
			all = append(all, main, fork, made{b, q})
			body, p = main.body, main.p
		}
		for i, m := range all {
			_, want, _ := dl.full(m.body)
			if !reflect.DeepEqual(prefixContent(want), prefixContent(m.p)) {
				t.Fatalf("%s: Prefix %d no longer describes its body\nwant %+v\ngot  %+v", dl.name, i, prefixContent(want), prefixContent(m.p))
			}
		}
	}
}

// Release hands a resumed skim's tables to the next request's skim: cleared, so that a pooled
// table keeps no body alive, and filled anew by that skim to give what the full skim gives.
func TestReleaseClearsAndRefillsTables(t *testing.T) {
	conv := func(n int, role string) []byte {
		var b strings.Builder
		b.WriteString(`{"model":"m","max_tokens":5,"input":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"role":%q,"content":[{"type":"text","text":"message %d"}]}`, role, i)
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	for d, dl := range prefixDialects {
		body := conv(200, "user")
		if d > 0 {
			body = bytes.Replace(body, []byte(`"input"`), []byte(`"messages"`), 1)
		}
		_, p, err := dl.full(body)
		if err != nil || p == nil {
			t.Fatalf("%s: %v", dl.name, err)
		}
		next := append(append(bytes.Clone(body[:p.End()]), `,{"role":"user","content":"new"}`...), `]}`...)
		for round := range 3 {
			tables, err := resumeAndRelease[d](next, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, kept := range tables {
				v := reflect.ValueOf(kept)
				for i := range v.Len() {
					if !v.Index(i).IsZero() {
						t.Fatalf("%s round %d: entry %d of a released table is %+v, not cleared", dl.name, round, i, v.Index(i))
					}
				}
			}
			sameSkim(t, d, next, p) // resumes into the tables just released, when the pool kept them
		}
	}
}

// resumeAndRelease, per dialect of prefixDialects, skims body resumed from p, releases the request
// and returns the tables it released, each at its whole capacity.
var resumeAndRelease = []func(body []byte, p *Prefix) ([]any, error){
	func(body []byte, p *Prefix) ([]any, error) {
		r, err := ParseResponsesFrom(body, p)
		if err != nil {
			return nil, err
		}
		tables := []any{r.table[:cap(r.table)]}
		r.Release()
		return tables, nil
	},
	func(body []byte, p *Prefix) ([]any, error) {
		r, err := ParseMessagesFrom(body, p)
		if err != nil {
			return nil, err
		}
		tables := []any{r.Messages[:cap(r.Messages)], r.blockBuf[:cap(r.blockBuf)]}
		r.Release()
		return tables, nil
	},
	func(body []byte, p *Prefix) ([]any, error) {
		r, err := ParseChatFrom(body, p)
		if err != nil {
			return nil, err
		}
		tables := []any{r.Messages[:cap(r.Messages)]}
		r.Release()
		return tables, nil
	},
}

// BenchmarkStringContentResume is the resumed skim of a 2 MB Messages conversation whose messages
// are strings with escaped newlines, as SDK clients send them, plus one new message. A string
// becomes a text block only when something asks (Message.ContentBlocks), no longer on every turn
// by a decode and an encode of it: 16 ms and 10.8 MB allocated a turn before, 24–45 µs and 67 KB
// after, on the thirteenth round's Xeon (BENCHMARKS.md).
func BenchmarkStringContentResume(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","max_tokens":5,"messages":[`)
	for i := 0; sb.Len() < 2<<20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		role := [2]string{"user", "assistant"}[i%2]
		fmt.Fprintf(&sb, `{"role":%q,"content":"line one of message %d\nline two %s"}`, role, i, strings.Repeat("x", 4000))
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	r, err := ParseMessagesRequest(body)
	if err != nil {
		b.Fatal(err)
	}
	p := r.Prefix()
	next := append(append(bytes.Clone(body[:p.End()]), `,{"role":"user","content":"new"}`...), `]}`...)
	b.SetBytes(int64(len(next)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMessagesFrom(next, p); err != nil {
			b.Fatal(err)
		}
	}
}
