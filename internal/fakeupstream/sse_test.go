package fakeupstream

import (
	"bytes"
	"encoding/json"
	"testing"
)

// X-Fake-SSE changes the spelling of a stream, never what it says: the events the grammar
// dispatches are the same JSON, on every streaming route.
func TestHeaderSSE(t *testing.T) {
	routes := []struct{ path, body string }{
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`},
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
	}
	// Ids and reply numbers count a server's requests: each stream comes from a fresh server.
	fresh := func(path, body string, hdr ...string) []byte {
		_, base := start(t, Options{})
		_, _, b := post(t, base+path, body, hdr...)
		return b
	}
	for _, rt := range routes {
		plain := fresh(rt.path, rt.body)
		want, _ := eventDatas(plain)
		if len(want) < 3 || bytes.Contains(plain, []byte("\r")) {
			t.Fatalf("%s: plain stream of %d events: %q", rt.path, len(want), plain)
		}
		for _, style := range []string{"crlf", "multiline", "crlf,multiline"} {
			t.Run(rt.path+"/"+style, func(t *testing.T) {
				body := fresh(rt.path, rt.body, HeaderSSE, style)
				if bytes.Equal(body, plain) {
					t.Fatal("the stream is spelled as before")
				}
				if bytes.Contains(body, []byte("\r\n")) != (style != "multiline") {
					t.Errorf("CRLF line ends: %v", bytes.Contains(body, []byte("\r\n")))
				}
				got, partial := eventDatas(body)
				if partial || len(got) != len(want) {
					t.Fatalf("%d events (partial %v), want %d", len(got), partial, len(want))
				}
				for i := range got {
					var compacted bytes.Buffer
					if !bytes.Equal(got[i], want[i]) && (json.Compact(&compacted, got[i]) != nil || !bytes.Equal(compacted.Bytes(), want[i])) {
						t.Errorf("event %d = %q, want %q", i, got[i], want[i])
					}
				}
			})
		}
	}
}
