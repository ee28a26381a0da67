package archive

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/stackcheck"
)

// refItemText is the recursive gjson walk itemText replaced, kept as the oracle for what it must
// extract: right on shallow values, quadratic and stack-hungry on deep ones.
func refItemText(item []byte) string {
	var b strings.Builder
	var walk func(v gjson.Result)
	walk = func(v gjson.Result) {
		switch v.Type {
		case gjson.String:
			s := handoff.Original(v.Str) // a summary or a quoted recall result is no history
			if s != "" && !(strings.HasPrefix(v.Str, "data:") && strings.Contains(v.Str[:min(len(v.Str), 100)], ";base64,")) {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(s)
			}
		case gjson.Number:
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(v.Raw)
		case gjson.JSON:
			if v.IsArray() {
				v.ForEach(func(_, e gjson.Result) bool { walk(e); return true })
				return
			}
			base64Source := v.Get("type").Str == "base64"
			v.ForEach(func(k, e gjson.Result) bool {
				switch k.Str {
				case "encrypted_content", "signature", "type", "id", "call_id", "status":
					return true
				case "data":
					if base64Source {
						return true
					}
				}
				walk(e)
				return true
			})
		}
	}
	walk(gjson.ParseBytes(item))
	if b.Len() == 0 && !gjson.ValidBytes(item) {
		return string(item)
	}
	return b.String()
}

func textSeeds() []string {
	seeds := []string{
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"a \"quoted\" \\ \n line \u00e9"}]}`,
		`{"type":"reasoning","id":"rs","summary":[{"type":"summary_text","text":"x"}],"encrypted_content":"gAAA"}`,
		`{"role":"user","content":[{"type":"image","source":{"data":"QUJD","type":"base64","media_type":"image/png"}},{"type":"text","text":"see data"}]}`,
		`{"content":[{"type":"image","source":{"type":"base64","data":"QUJD"}},{"data":"kept","type":"url"}]}`,
		`{"content":[{"type":"thinking","thinking":"hmm","signature":"c2ln"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}`,
		`{"a":[1,-2.5e3,true,false,null,{"b":"c"}],"id":{"nested":"skipped"},"status":"x","k":[],"t\u0079pe":"esc-key"}`,
		` { "spaced" : [ "a" , { "b" : "c" } ] , "n" : 7 } `,
		`"top-level string"`,
		`42`,
		`plain text line, not JSON`,
		`2024-01-01 log line`,
	}
	files, _ := filepath.Glob("/work/shared/fixtures/codex-0.169/*.json")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, it := range gjson.GetBytes(b, "body.input").Array() {
			seeds = append(seeds, it.Raw)
		}
	}
	return seeds
}

func TestItemTextMatchesReference(t *testing.T) {
	for _, s := range textSeeds() {
		if got, want := itemText([]byte(s)), refItemText([]byte(s)); got != want {
			t.Errorf("itemText(%.80s) = %q, want %q", s, got, want)
		}
	}
}

func FuzzItemText(f *testing.F) {
	for _, s := range textSeeds() {
		f.Add(s)
	}
	f.Add(`{"a":"unterminated`)
	f.Add(`[[[[[[`)
	f.Fuzz(func(t *testing.T, s string) {
		got := itemText([]byte(s)) // must not panic or hang
		if jsonx.ValidString(s) != nil {
			return
		}
		if want := refItemText([]byte(s)); got != want {
			t.Errorf("itemText(%q) = %q, want %q", s, got, want)
		}
	})
}

// deepItem returns an item holding a value nested 2n levels deep, one string per level
// ({"t":"w0","c":[{"t":"w1","c":[…]}]}), and flatItem one holding the same strings in the same
// order one level deep: the text extracted from both must be the same.
func deepItem(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"function_call_output","call_id":"c1","output":`)
	for i := range n {
		b.WriteString(`{"t":"w` + strconv.Itoa(i) + `","c":[`)
	}
	b.WriteString(`{"t":"end"}`)
	for range n {
		b.WriteString(`]}`)
	}
	b.WriteString(`}`)
	return b.String()
}

func flatItem(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"function_call_output","call_id":"c1","output":[`)
	for i := range n {
		b.WriteString(`{"t":"w` + strconv.Itoa(i) + `"},`)
	}
	b.WriteString(`{"t":"end"}]}`)
	return b.String()
}

// TestArchiveWalksLinearInNesting runs the archive's walks over client items — indexing a
// segment, choosing its excerpt — on an item nested 200k levels deep, built directly (the front
// door would refuse it). Each must finish under the stack cap with heap allocations at most 8
// bytes per input byte above those for the flat item with the same strings, and give the same
// result as for the flat item with the same strings. Before the text walk was iterative it
// recursed through gjson.ForEach, re-scanning the rest of the value at every level, and
// overflowed the cap.
func TestArchiveWalksLinearInNesting(t *testing.T) {
	const n = 100_000
	deep, flat := deepItem(n), flatItem(n)
	ix := newBlindIndex(testKey)
	q := parseQuery("w99999 end")
	walks := []struct {
		name string
		run  func(item string) any
	}{
		{"item text", func(it string) any { return itemText([]byte(it)) }},
		{"index document", func(it string) any { return ix.document("t", []json.RawMessage{json.RawMessage(it)}) }},
		{"excerpt", func(it string) any {
			i, ex := bestExcerpt(q, []json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"x"}`), json.RawMessage(it)}, 400)
			return strconv.Itoa(i) + " " + ex
		}},
	}
	for _, tc := range walks {
		t.Run(tc.name, func(t *testing.T) {
			var got, want any
			alloc := stackcheck.Run(func() { got = tc.run(deep) })
			flatAlloc := stackcheck.Run(func() { want = tc.run(flat) })
			// the index holds one entry per distinct word, so its allocations follow the
			// words, not the bytes: the flat item with the same words is the yardstick, and
			// nesting may add its explicit stack (a word per level) on top
			if limit := flatAlloc + uint64(8*len(deep)); alloc > limit {
				t.Errorf("allocated %d bytes for a %d-byte item (flat: %d), want at most %d", alloc, len(deep), flatAlloc, limit)
			}
			if got != want {
				t.Errorf("deep and flat items differ: %.200v vs %.200v", got, want)
			}
		})
	}
}
