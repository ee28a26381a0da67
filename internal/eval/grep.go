package eval

import (
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
)

// The grep column: the "grep over the raw log" baseline of the compaction literature ("Lost in
// Compaction"), the upper bound recall could reach. For each asked fact it is whether the fact's
// exact answer text occurs in what the model was given on the question turn (every request
// compactd sent the model while the question was answered, recall rounds included, as the tap
// recorded them) or in the raw history the client had sent compactd by then (every item of the
// session: what compactd archives). It is computed from those bytes, never from the planted
// facts: a value the session never carried, or carried only inside an opaque compaction item,
// does not count.

// plumbing are the JSON keys whose strings no model reads as text: ids, types, roles, statuses,
// sealed payloads. Leaving them out keeps a value from being "found" inside a base64 blob or an
// id.
var plumbing = map[string]bool{
	"type": true, "role": true, "id": true, "call_id": true, "status": true, "tool_use_id": true,
	"tool_call_id": true, "encrypted_content": true, "signature": true, "cache_control": true,
	"media_type": true, "detail": true, "phase": true, "model": true, "prompt_cache_key": true,
}

// modelKeys are the top-level members of a request the model reads: Responses instructions and
// input, Messages system and messages, Chat messages.
var modelKeys = [...]string{"instructions", "system", "input", "messages"}

// appendText appends every string of doc (but plumbing) to b, one a line. A document deeper
// than jsonx.MaxDepth is skipped: the walk recurses per level.
func appendText(b *strings.Builder, doc []byte) {
	if jsonx.CheckDepth(doc, jsonx.MaxDepth) != nil {
		return
	}
	walkText(gjson.ParseBytes(doc), b)
}

// appendRequestText appends the text the model reads of one request body (modelKeys).
func appendRequestText(b *strings.Builder, body []byte) {
	if jsonx.CheckDepth(body, jsonx.MaxDepth) != nil {
		return
	}
	root := gjson.ParseBytes(body)
	for _, k := range modelKeys {
		walkText(root.Get(k), b)
	}
}

func walkText(r gjson.Result, b *strings.Builder) {
	switch {
	case r.Type == gjson.String:
		b.WriteString(r.Str)
		b.WriteByte('\n')
	case r.IsObject():
		r.ForEach(func(k, v gjson.Result) bool {
			if !plumbing[k.Str] {
				walkText(v, b)
			}
			return true
		})
	case r.IsArray():
		r.ForEach(func(_, v gjson.Result) bool {
			walkText(v, b)
			return true
		})
	}
}

// rawLogText is the text of a client history (the items, messages or blocks it sent).
func rawLogText[T any](history []T) string {
	var b strings.Builder
	for _, h := range history {
		raw, err := json.Marshal(h)
		if err != nil {
			continue
		}
		appendText(&b, raw)
	}
	return b.String()
}

// grepFound reports whether answer occurs verbatim in the raw log or in the question turn's
// upstream requests (inContext: in the latter).
func grepFound(answer, rawLog string, turn [][]byte) (found, inContext bool) {
	if answer == "" {
		return false, false
	}
	var b strings.Builder
	for _, body := range turn {
		appendRequestText(&b, body)
	}
	inContext = strings.Contains(b.String(), answer)
	return inContext || strings.Contains(rawLog, answer), inContext
}

// grepped fills a's Grep and InContext.
func (a Asked) grepped(rawLog string, turn [][]byte) Asked {
	a.Grep, a.InContext = grepFound(a.Fact.Answer, rawLog, turn)
	return a
}
