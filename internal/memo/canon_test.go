package memo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fixtures"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/stackcheck"
)

// canonical is one item's canonical encoding as a Chain computes it before hashing, copied out of
// the tree's buffer.
func canonical(d dialect.Name, item []byte) ([]byte, error) {
	var t tree
	out, err := t.canonical(d, item)
	return bytes.Clone(out), err
}

func TestCanonicalEqual(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    dialect.Name
		a, b string
	}{
		{"key order and whitespace", dialect.Responses,
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`,
			"{ \"content\" : [ {\"text\":\"hi\",\n\"type\":\"input_text\"} ], \"role\":\"user\", \"type\":\"message\" }"},
		{"string escapes", dialect.Responses,
			`{"type":"message","role":"user","content":"caf\u00e9 a\/b \u0041"}`,
			`{"type":"message","role":"user","content":"café a/b A"}`},
		{"escaped backslash then slash escape", dialect.Responses,
			`{"type":"message","role":"user","content":"x\\ \/ \n"}`,
			`{"type":"message","role":"user","content":"x\\ / \n"}`},
		{"escapes that stay escaped", dialect.Responses,
			`{"type":"message","role":"user","content":"tab\u0009nl\u000aq\u0022"}`,
			`{"type":"message","role":"user","content":"tab\tnl\nq\""}`},
		{"escaped key", dialect.Responses,
			`{"\u0074ype":"message","role":"user","content":"x"}`,
			`{"type":"message","role":"user","content":"x"}`},
		{"surrogate pair escape is its character", dialect.Messages,
			`{"role":"user","content":"a\ud83d\ude00b"}`, `{"role":"user","content":"a😀b"}`},
		{"hex case of a lone surrogate", dialect.Messages,
			`{"role":"user","content":"a\uD800b"}`, `{"role":"user","content":"a\ud800b"}`},
		{"lone surrogate then an escaped letter", dialect.Messages,
			`{"role":"user","content":"\ud800\u0041"}`, `{"role":"user","content":"\ud800A"}`},
		{"hex case of U+FFFD", dialect.Messages,
			`{"role":"user","content":"a\uFFFDb"}`, "{\"role\":\"user\",\"content\":\"a\uFFFDb\"}"},
		{"id and status dropped", dialect.Responses,
			`{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"ok"}]}`,
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}`},
		{"null id", dialect.Responses,
			`{"type":"message","id":null,"status":null,"role":"user","content":"x"}`,
			`{"type":"message","role":"user","content":"x"}`},
		{"user string vs one input_text part", dialect.Responses,
			`{"type":"message","role":"user","content":"hello"}`,
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}`},
		{"assistant string vs one output_text part with empty annotations", dialect.Responses,
			`{"type":"message","role":"assistant","content":"hello"}`,
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hello","annotations":[],"logprobs":[]}]}`},
		{"easy input message has type message", dialect.Responses,
			`{"role":"user","content":"hello"}`,
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}`},
		{"codex metadata passthrough", dialect.Responses,
			`{"type":"message","role":"user","content":"x","internal_chat_message_metadata_passthrough":{"turn_id":"a","create_time":1.5}}`,
			`{"type":"message","role":"user","content":"x"}`},
		{"function_call id and status", dialect.Responses,
			`{"type":"function_call","id":"fc_1","status":"completed","call_id":"c1","name":"shell","arguments":"{}"}`,
			`{"call_id":"c1","name":"shell","arguments":"{}","type":"function_call"}`},
		{"function_call_output string vs one input_text part", dialect.Responses,
			`{"type":"function_call_output","call_id":"c1","output":"done"}`,
			`{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"done"}]}`},
		{"reasoning id", dialect.Responses,
			`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}`,
			`{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}`},

		{"user string vs one text block", dialect.Messages,
			`{"role":"user","content":"hello"}`,
			`{"role":"user","content":[{"type":"text","text":"hello"}]}`},
		{"cache_control on the only block", dialect.Messages,
			`{"role":"user","content":[{"type":"text","text":"hello","cache_control":{"type":"ephemeral"}}]}`,
			`{"role":"user","content":"hello"}`},
		{"cache_control on a tool_result", dialect.Messages,
			`{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"out","cache_control":{"type":"ephemeral","ttl":"1h"}}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"out"}]}`},
		{"tool_result content string vs one text block with cache_control", dialect.Messages,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"out","cache_control":{"type":"ephemeral"}}]}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"out"}]}`},
		{"cache_control on one of several blocks", dialect.Messages,
			`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]}`,
			`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`},
		{"cache_control deeper in a block", dialect.Messages,
			`{"role":"user","content":[{"type":"search_result","source":"s","title":"t","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]},{"type":"text","text":"q"}]}`,
			`{"role":"user","content":[{"type":"search_result","source":"s","title":"t","content":[{"type":"text","text":"x"}]},{"type":"text","text":"q"}]}`},
		{"null citations", dialect.Messages,
			`{"role":"assistant","content":[{"type":"text","text":"ok","citations":null}]}`,
			`{"role":"assistant","content":"ok"}`},

		{"chat string vs one text part", dialect.Chat,
			`{"role":"user","content":"hi"}`,
			`{"role":"user","content":[{"type":"text","text":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := canonical(tc.d, []byte(tc.a))
			if err != nil {
				t.Fatal(err)
			}
			cb, err := canonical(tc.d, []byte(tc.b))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ca, cb) {
				t.Errorf("canonical forms differ:\n a %s\n b %s", ca, cb)
			}
			if !json.Valid(ca) {
				t.Errorf("canonical form is not JSON: %s", ca)
			}
		})
	}
}

// TestCanonicalDistinct: what the model can tell apart must stay apart. A false match would
// apply one conversation's summary to another, so these matter more than the equalities.
func TestCanonicalDistinct(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    dialect.Name
		a, b string
	}{
		{"text", dialect.Responses, `{"type":"message","role":"user","content":"a"}`, `{"type":"message","role":"user","content":"b"}`},
		{"role", dialect.Responses, `{"type":"message","role":"user","content":"a"}`, `{"type":"message","role":"developer","content":"a"}`},
		{"two parts vs one string", dialect.Responses,
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}`,
			`{"type":"message","role":"user","content":"ab"}`},
		{"part with more than text", dialect.Responses,
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a","annotations":[{"type":"url_citation","url":"u"}]}]}`,
			`{"type":"message","role":"assistant","content":"a"}`},
		{"assistant input_text is not collapsed", dialect.Responses,
			`{"type":"message","role":"assistant","content":[{"type":"input_text","text":"a"}]}`,
			`{"type":"message","role":"assistant","content":"a"}`},
		{"item_reference keeps its id", dialect.Responses, `{"type":"item_reference","id":"msg_1"}`, `{"type":"item_reference","id":"msg_2"}`},
		{"call_id", dialect.Responses,
			`{"type":"function_call_output","call_id":"c1","output":"x"}`,
			`{"type":"function_call_output","call_id":"c2","output":"x"}`},
		{"id inside content is data", dialect.Responses,
			`{"type":"function_call","call_id":"c","name":"f","arguments":"{\"id\":1}"}`,
			`{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}`},
		{"number spelling is kept", dialect.Responses,
			`{"type":"message","role":"user","content":"a","x":1}`, `{"type":"message","role":"user","content":"a","x":1.0}`},
		{"array order", dialect.Messages,
			`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`,
			`{"role":"user","content":[{"type":"text","text":"b"},{"type":"text","text":"a"}]}`},
		{"cache_control inside a tool input is data", dialect.Messages,
			`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"cache_control":1}}]}`,
			`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}`},
		{"tool_use id is kept", dialect.Messages,
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}`,
			`{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"f","input":{}}]}`},
		{"image block is not text", dialect.Messages,
			`{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}}]}`,
			`{"role":"user","content":"AA"}`},
		{"escaped backslash before u is text", dialect.Messages,
			`{"role":"user","content":"a\\u0041"}`, `{"role":"user","content":"aA"}`},
		{"escaped quote is not a key end", dialect.Messages,
			`{"role":"user","content":"a\":\"b"}`, `{"role":"user","content":"a","b":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := canonical(tc.d, []byte(tc.a))
			if err != nil {
				t.Fatal(err)
			}
			cb, err := canonical(tc.d, []byte(tc.b))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(ca, cb) {
				t.Errorf("distinct items canonicalise the same: %s", ca)
			}
		})
	}
	// Lone surrogate escapes (issue 22, defect 7): valid JSON that decoders read apart (Python
	// keeps each surrogate, Go and JavaScript's TextEncoder turn them into U+FFFD, some refuse
	// them), and compactd forwards the escape as sent. Each is its own text.
	texts := []string{`\ud800`, `\udfff`, `\udbff`, `\udc00`, `\ufffd`, `\ud800\ud800`, `\udc00\ud800`, `\ud800\udc00`, `\ud800A`, `A`, `\\ud800`, ``}
	seen := map[string]string{}
	for _, d := range dialect.All {
		for _, text := range texts {
			c, err := canonical(d, []byte(`{"role":"user","content":"`+text+`"}`))
			if err != nil {
				t.Fatalf("%s: %v", text, err)
			}
			if other, ok := seen[string(d)+string(c)]; ok {
				t.Errorf("%s: %q and %q canonicalise the same: %s", d, other, text, c)
			}
			seen[string(d)+string(c)] = text
		}
	}
	// The same bytes under two dialects seed different chains.
	a, _ := Prefixes(dialect.Responses, []json.RawMessage{json.RawMessage(`{"role":"user","content":"x"}`)})
	b, _ := Prefixes(dialect.Chat, []json.RawMessage{json.RawMessage(`{"role":"user","content":"x"}`)})
	if a[0] == b[0] {
		t.Error("one item hashes the same under two dialects")
	}
}

func TestCanonicalErrors(t *testing.T) {
	deep := strings.Repeat("[", jsonx.MaxDepth+1) + strings.Repeat("]", jsonx.MaxDepth+1)
	for _, tc := range []struct {
		name string
		d    dialect.Name
		item string
		want error
	}{
		{"invalid", dialect.Responses, `{"type":`, jsonx.ErrInvalid},
		{"too deep", dialect.Messages, `{"role":"user","content":` + deep + `}`, jsonx.ErrTooDeep},
		{"dialect", dialect.Name("soap"), `{}`, ErrDialect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := canonical(tc.d, []byte(tc.item)); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			c := NewChain(tc.d)
			if _, err := c.Add([]byte(tc.item)); !errors.Is(err, tc.want) {
				t.Errorf("Chain.Add err = %v, want %v", err, tc.want)
			}
			if _, err := c.Add([]byte(`{}`)); err == nil {
				t.Error("a chain continued past a bad item")
			}
		})
	}
}

// TestChainIsIncremental: H_n = sha256(H_{n-1} || canon(item_n)), and Prefixes agrees with Add.
func TestChainIsIncremental(t *testing.T) {
	items := []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"a"}`),
		json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"b"}]}`),
		json.RawMessage(`{"role":"user","content":"c"}`),
	}
	ps, err := Prefixes(dialect.Messages, items)
	if err != nil {
		t.Fatal(err)
	}
	prev := Seed(dialect.Messages)
	for i, it := range items {
		canon, _ := canonical(dialect.Messages, it)
		want := Hash(sha256.Sum256(append(prev[:len(prev):len(prev)], canon...)))
		if ps[i] != want {
			t.Fatalf("H_%d = %s, want %s", i+1, ps[i], want)
		}
		prev = want
	}
	if ps[0] == ps[1] || ps[1] == ps[2] {
		t.Error("consecutive prefixes share a hash")
	}
}

// rawPrefixes hashes items byte-exact, without canonicalisation: the baseline that shows the
// captures really do rewrite earlier turns.
func rawPrefixes(items []json.RawMessage) []Hash {
	var out []Hash
	cur := Hash{}
	for _, it := range items {
		cur = sha256.Sum256(append(cur[:len(cur):len(cur)], it...))
		out = append(out, cur)
	}
	return out
}

func items(t *testing.T, body []byte, path string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for _, r := range gjson.GetBytes(body, path).Array() {
		out = append(out, json.RawMessage(r.Raw))
	}
	if len(out) == 0 {
		t.Fatalf("no items at %s", path)
	}
	return out
}

// sessionPrefixes checks a captured session: once canonicalised, every request's items are a
// prefix of the next request's. It returns how many consecutive pairs differ byte-wise in the
// items they share, i.e. how often the client re-serialised an earlier turn.
func sessionPrefixes(t *testing.T, dir, path string, d dialect.Name) (rewrites int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) < 4 {
		t.Fatalf("want at least 4 captured requests in %s, have %d (%v)", dir, len(files), err)
	}
	var prev, prevRaw []Hash
	for i, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		its := items(t, body, path)
		ps, err := Prefixes(d, its)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		raw := rawPrefixes(its)
		if i > 0 {
			if len(ps) <= len(prev) {
				t.Fatalf("%s has %d items, not more than the %d before", f, len(ps), len(prev))
			}
			for k := range prev {
				if ps[k] != prev[k] {
					t.Errorf("%s: H_%d differs from the previous request's", filepath.Base(f), k+1)
					break
				}
			}
			if raw[len(prevRaw)-1] != prevRaw[len(prevRaw)-1] {
				rewrites++
			}
		}
		prev, prevRaw = ps, raw
	}
	return rewrites
}

// TestClaudeCodeCapturesSharePrefixes: in the real Claude Code session every request's
// messages are a prefix of the next request's once canonicalised, although Claude Code
// rewrote them between requests (the system-role turn as a one-block list, then a string; the
// cache_control breakpoint moving to the newest message). Without the canonicalisation the
// byte-exact chain diverges, which the test also checks so it cannot pass vacuously.
func TestClaudeCodeCapturesSharePrefixes(t *testing.T) {
	if n := sessionPrefixes(t, claudeCaptureDir, "messages", dialect.Messages); n == 0 {
		t.Error("no request rewrote an earlier message byte-wise: the capture does not exercise canonicalisation")
	}
}

// TestCodexSessionSharesPrefixes: the real Codex CLI session (four turns, a tool call). Codex
// 0.169 resends its history byte for byte, ids and statuses included, so canonicalisation must
// simply not get in the way.
func TestCodexSessionSharesPrefixes(t *testing.T) {
	sessionPrefixes(t, codexCaptureDir, "input", dialect.Responses)
}

// TestCodexCapturesSharePrefixes: consecutive requests of one Codex session (the normal turn,
// then the compaction request that follows it) share the hashes of the items they share.
func TestCodexCapturesSharePrefixes(t *testing.T) {
	first := items(t, fixtures.Codex("normal_turn_request.json"), "body.input")
	next := items(t, fixtures.Codex("remote_v2_compaction_request.json"), "body.input")
	a, err := Prefixes(dialect.Responses, first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Prefixes(dialect.Responses, next)
	if err != nil {
		t.Fatal(err)
	}
	for k := range a {
		if a[k] != b[k] {
			t.Fatalf("H_%d differs between consecutive Codex requests", k+1)
		}
	}
	// The post-compaction request of the same session keeps the base instructions (item 0),
	// rewrites the turn context and replaces the history with a compaction item.
	post, err := Prefixes(dialect.Responses, items(t, fixtures.Codex("remote_v2_post_compaction_turn_request.json"), "body.input"))
	if err != nil {
		t.Fatal(err)
	}
	if post[0] != a[0] {
		t.Error("the base instructions hash differently after the compaction")
	}
	if len(post) < 5 || post[4] == b[4] {
		t.Error("a history with a compaction item hashes like the one it replaced")
	}
	// Every Codex capture canonicalises.
	names, bodies := fixtures.CodexAll()
	for i, body := range bodies {
		if _, err := Prefixes(dialect.Responses, items(t, body, "body.input")); err != nil {
			t.Errorf("%s: %v", names[i], err)
		}
	}
}

// TestCanonicalLinearInNesting: a maximally nested item is canonicalised by the iterative walk
// (stacks capped, so one frame per level would kill the test) with allocation proportional to
// its size, like a flat item of the same size.
func TestCanonicalLinearInNesting(t *testing.T) {
	depth := jsonx.MaxDepth - 3
	deep := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":` +
		strings.Repeat(`{"a":[`, depth/2-2) + `1` + strings.Repeat(`]}`, depth/2-2) + `}]}`
	flat := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[` +
		strings.TrimSuffix(strings.Repeat(`{"a":1},`, depth/2), ",") + `]}]}`
	if err := jsonx.Valid([]byte(deep)); err != nil {
		t.Fatal(err)
	}
	var errDeep, errFlat error
	deepAlloc := stackcheck.Run(func() {
		c := NewChain(dialect.Messages)
		for range 20 {
			c.Add([]byte(deep))
		}
		errDeep = c.err
	})
	flatAlloc := stackcheck.Run(func() {
		c := NewChain(dialect.Messages)
		for range 20 {
			c.Add([]byte(flat))
		}
		errFlat = c.err
	})
	if errDeep != nil || errFlat != nil {
		t.Fatal(errDeep, errFlat)
	}
	if deepAlloc > 4*flatAlloc+1<<20 {
		t.Errorf("deep item allocated %d bytes, flat item of similar size %d", deepAlloc, flatAlloc)
	}
	// Far past the bound: refused by the iterative validator, never walked.
	huge := strings.Repeat("[", 200_000)
	stackcheck.Run(func() { _, errDeep = canonical(dialect.Messages, []byte(huge)) })
	if !errors.Is(errDeep, jsonx.ErrTooDeep) {
		t.Errorf("200k-deep item: err = %v", errDeep)
	}
}

// One conversation is never handed another's compaction because their texts differ only in lone
// surrogate escapes (issue 22, defect 7): a compaction recorded after `\ud800` is a miss for the
// same conversation with `\udfff` or `\ufffd`, and a hit for `\ud800` itself.
func TestMemoLoneSurrogatesDoNotShareRecords(t *testing.T) {
	ctx := context.Background()
	conv := func(text string) []json.RawMessage {
		return []json.RawMessage{
			json.RawMessage(`{"role":"user","content":"read the log"}`),
			json.RawMessage(`{"role":"assistant","content":"it says: ` + text + `"}`),
		}
	}
	k := Key{Tenant: "t", Dialect: dialect.Messages}
	l := NewLocal(0, 0)
	rec, err := Prefixes(dialect.Messages, conv(`\ud800`))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, k, rec[1], 2, []byte("summary of the \\ud800 conversation")); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{`\ud800`, `\uD800`, `\udfff`, `\ufffd`, "\uFFFD", `\\ud800`} {
		p, err := Prefixes(dialect.Messages, conv(text))
		if err != nil {
			t.Fatal(err)
		}
		_, hit, _ := l.Longest(ctx, k, p)
		if want := text == `\ud800` || text == `\uD800`; hit != want {
			t.Errorf("%q: hit %v, want %v", text, hit, want)
		}
	}
}

// recodeStringV1 is the string rule before lone surrogates kept their escapes (v1 of the seed
// domain): decode (a lone surrogate to U+FFFD), then encode canonically.
func recodeStringV1(s []byte) []byte {
	text := jsonx.AppendUnquoted(nil, s[1:len(s)-1])
	var out []byte
	out = append(out, '"')
	for _, r := range string(text) {
		out = appendCanonRune(out, r)
	}
	return append(out, '"')
}

// FuzzCanonString: the canonical string is valid JSON that every decoder reads as the original
// (encoding/json for one), canonicalising it again changes nothing, and on text without lone
// surrogate escapes the rule is the one v1 hashed (only those changed with v2).
func FuzzCanonString(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u00e9\/\n"`, `"\ud83d\ude00"`, `"\ud800"`, `"\uDFFF\ud800x"`, `"\ud800\u0041"`,
		`"\ud800\udc00\udc00"`, `"\\ud800"`, `"\u0000\u001f\u007f\u2028"`, `"\"\\\u005c\u0022"`, `"\ud83d\\ude00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		if len(s) < 2 || s[0] != '"' || jsonx.Valid(s) != nil {
			return
		}
		if end, ok := jsonx.StringEnd(s, 0); !ok || end != len(s) {
			return // one literal, as the parse hands canonString
		}
		c := canonString(s)
		if jsonx.Valid(c) != nil {
			t.Fatalf("%q: canonical %q is not valid JSON", s, c)
		}
		var a, b string
		if json.Unmarshal(s, &a) != nil || json.Unmarshal(c, &b) != nil || a != b {
			t.Fatalf("%q reads as %q, its canonical %q as %q", s, a, c, b)
		}
		if again := canonString(c); !bytes.Equal(again, c) {
			t.Fatalf("%q: canonical %q, again %q", s, c, again)
		}
		if v1 := recodeStringV1(s); !hasLoneSurrogate(s) && !bytes.Equal(c, v1) {
			t.Fatalf("%q: canonical %q, v1 %q", s, c, v1)
		}
	})
}

// hasLoneSurrogate reports whether the literal s has a \u escape of a surrogate that is not half
// of a pair.
func hasLoneSurrogate(s []byte) bool {
	in := s[1 : len(s)-1]
	for i := 0; i < len(in); i++ {
		if in[i] != '\\' {
			continue
		}
		i++
		if in[i] != 'u' {
			continue
		}
		r := hex4(in[i+1:])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		if i+6 < len(in) && in[i+1] == '\\' && in[i+2] == 'u' && utf16.DecodeRune(r, hex4(in[i+3:])) != utf8.RuneError {
			i += 6
			continue
		}
		return true
	}
	return false
}

// Records written under v1 stay unreachable: v1 hashed the `\ud800` conversation as the one with
// a real U+FFFD, which v2 still canonicalises as v1 did, so without a new seed domain a record of
// the first, stored before the upgrade, would be handed to the second after it.
func TestMemoV1RecordsDoNotMatch(t *testing.T) {
	ctx := context.Background()
	items := []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"read the log"}`),
		json.RawMessage(`{"role":"assistant","content":"it says: \ufffd"}`),
	}
	// v1's H_2 of the `\ud800` conversation: its canonical items are those of this one.
	v1 := sha256.Sum256([]byte("compactd/memo/v1\x00" + string(dialect.Messages)))
	for _, it := range items {
		c, err := canonical(dialect.Messages, it)
		if err != nil {
			t.Fatal(err)
		}
		v1 = sha256.Sum256(append(v1[:], c...))
	}
	k := Key{Tenant: "t", Dialect: dialect.Messages}
	l := NewLocal(0, 0)
	if err := l.Record(ctx, k, v1, 2, []byte("summary of the \\ud800 conversation, recorded by v1")); err != nil {
		t.Fatal(err)
	}
	p, err := Prefixes(dialect.Messages, items)
	if err != nil {
		t.Fatal(err)
	}
	if _, hit, _ := l.Longest(ctx, k, p); hit {
		t.Error("a v1 record matches under the current rules")
	}
}

// TestSeedsStable pins each dialect's chain seed and one item's prefix hash, as written before
// the dialect's name moved to internal/dialect: the memo's stored records are keyed by these
// hashes and the dialect's name, so a change in either (a renamed dialect, a new seed domain)
// would turn every stored record into a miss, and must be deliberate.
func TestSeedsStable(t *testing.T) {
	item := json.RawMessage(`{"type":"message","role":"user","content":"hi"}`)
	for _, tt := range []struct {
		d            dialect.Name
		seed, prefix string
	}{
		{dialect.Responses, "c7103d125748f1be4129e92e2b46853f6e60958c88cd6f1eb6d236d87ac38734", "dbd6e78ad0155d4d5888d3a2b3fff9b9dfa48d6bd3e847d6fcc3750515662dcb"},
		{dialect.Messages, "801ba0a6be58fc73153fa7aed9ee500b34b37cd2cdd8c166982019aa1c2c1add", "cecc8f9d92aecbdec602f6be5918edeec774311fa93e28aa22e18625432cc956"},
		{dialect.Chat, "b86367fe1ede95037610c0a7bfb2b1cabe2af4808d5f19d819c6cf5b3dd981e8", "20c8d2b3a87306a5c4804b423ddcaf251348ad1d32232d9bd4346ad1e1a7156a"},
	} {
		if got := Seed(tt.d).String(); got != tt.seed {
			t.Errorf("%s: seed %s, want %s", tt.d, got, tt.seed)
		}
		ps, err := Prefixes(tt.d, []json.RawMessage{item})
		if err != nil || len(ps) != 1 || ps[0].String() != tt.prefix {
			t.Errorf("%s: prefixes %v, %v; want [%s]", tt.d, ps, err, tt.prefix)
		}
	}
}
