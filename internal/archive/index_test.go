package archive

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestScanTokens(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"parseConfig failed", []string{"parseConfig", "failed"}},
		{"see src/main.go:42.", []string{"see", "src/main.go:42"}},
		{"ERR_TIMEOUT on 127.0.0.1:8080!", []string{"ERR_TIMEOUT", "on", "127.0.0.1:8080"}},
		{"--verbose -- flag", []string{"verbose", "flag"}},
		{"(/usr/bin/env) 'x'", []string{"usr/bin/env", "x"}},
		{"Grüße, naïve café", []string{"Grüße", "naïve", "café"}},
		{"日本語 テキスト", []string{"日本語", "テキスト"}},
		{"... -- ::", nil},
		{strings.Repeat("a", maxTokenBytes+1) + " ok", []string{"ok"}},
	}
	for _, tc := range cases {
		var got []string
		scanTokens(tc.in, func(tok string, s, e int) {
			if tc.in[s:e] != tok {
				t.Errorf("%q: span [%d,%d) = %q, token %q", tc.in, s, e, tc.in[s:e], tok)
			}
			got = append(got, tok)
		})
		if !slices.Equal(got, tc.want) {
			t.Errorf("scanTokens(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSubParts(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"parseConfig", []string{"parse", "config"}},
		{"HTTPServer", []string{"http", "server"}},
		{"getHTTPResponseCode", []string{"get", "http", "response", "code"}},
		{"src/main.go", []string{"src", "main", "go"}},
		{"ERR_TIMEOUT", []string{"err", "timeout"}},
		{"utf8Decode", []string{"utf8", "decode"}},
		{"a.b.a", []string{"a", "b"}},
		// a camelCase piece of a dotted or slashed token is a term of its own, so the method
		// name finds h.retryAccountWebhook(…) as well as its parts do
		{"h.retryAccountWebhook", []string{"h", "retryaccountwebhook", "retry", "account", "webhook"}},
		{"internal/parseConfig.go", []string{"internal", "parseconfig", "parse", "config", "go"}},
		{"8080", nil},
		{"simple", nil},
		{"Simple", nil},
	}
	for _, tc := range cases {
		if got := subParts(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("subParts(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestItemText(t *testing.T) {
	cases := []struct {
		name, item string
		want       string
	}{
		{"message", `{"type":"message","role":"user","content":[{"type":"input_text","text":"hello world"}]}`, "user\nhello world"},
		{"call", `{"type":"function_call","id":"fc_1","call_id":"c1","name":"shell","arguments":"{\"cmd\":\"ls\"}"}`, "shell\n{\"cmd\":\"ls\"}"},
		{"numbers kept", `{"exit_code":137,"ok":true,"v":null}`, "137"},
		{"reasoning blob", `{"type":"reasoning","encrypted_content":"gAAAA","summary":[{"type":"summary_text","text":"thought"}]}`, "thought"},
		{"thinking signature", `{"type":"thinking","thinking":"hmm","signature":"EqQB"}`, "hmm"},
		{"base64 image", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo"}}`, "image/png"},
		{"data url", `{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo"}`, ""},
		{"not json", `plain session log line`, "plain session log line"},
	}
	for _, tc := range cases {
		if got := itemText([]byte(tc.item)); got != tc.want {
			t.Errorf("%s: itemText = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestBlindIndex(t *testing.T) {
	ix := newBlindIndex([]byte(strings.Repeat("k", 32)))
	items := []json.RawMessage{msg("user", "parseConfig parseConfig failed at src/main.go")}
	doc := ix.document("t1", items)
	words := strings.Fields(doc)
	// user parseconfig parse config failed at src/main.go src main go — each once, sorted.
	if len(words) != 10 || !slices.IsSorted(words) {
		t.Fatalf("document = %q", doc)
	}
	for _, w := range words {
		if len(w) != 11 || w[0] != 'h' || strings.Trim(w[1:], b32) != "" {
			t.Errorf("bad hash word %q", w)
		}
		if strings.Contains(doc, "parse") || strings.Contains(doc, "main") {
			t.Errorf("plaintext in document %q", doc)
		}
	}
	if again := ix.document("t1", items); again != doc {
		t.Error("document not deterministic")
	}
	if other := ix.document("t2", items); other == doc {
		t.Error("two tenants share hash words")
	}
	h := ix.hasher("t1")
	if !slices.Contains(words, h.word("parseconfig")) || !slices.Contains(words, h.word("config")) {
		t.Error("query hashes do not match document hashes")
	}
	if ix2 := newBlindIndex([]byte(strings.Repeat("j", 32))); ix2.document("t1", items) == doc {
		t.Error("a different key produced the same document")
	}
}

func TestMatchExpr(t *testing.T) {
	q := parseQuery("foo src/main parseConfig FOO")
	if len(q) != 3 {
		t.Fatalf("parseQuery = %+v", q)
	}
	got := matchExpr(q, " AND ", " OR ", " AND ")
	want := "foo AND (src/main OR (src AND main)) AND (parseconfig OR (parse AND config))"
	if got != want {
		t.Errorf("matchExpr = %q\nwant %q", got, want)
	}
	set := map[string]bool{"src": true, "main": true, "parse": true}
	has := func(s string) bool { return set[s] }
	if n := countMatches(q, has); n != 1 {
		t.Errorf("countMatches = %d, want 1 (only src/main through its parts)", n)
	}
}
