package fakeupstream

import (
	"bytes"
	"crypto/sha256"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/jsonx"
)

// parsed is what the fake needs from a request body, read with gjson so that a multi-megabyte
// history is skimmed, not decoded.
type parsed struct {
	valid      bool   // body is JSON (GET /v1/models has no body and needs none)
	model      string // echoed back
	stream     bool
	lastUser   string // text of the last user message that has text
	toolResult bool   // a tool result follows the last user message: answer, don't call again
	summary    bool   // a user message contains <conversation>
	transcript string // what lies between <conversation> and </conversation>
	inputToks  int64  // estimate: text content bytes / 4, at least 1
	compaction string // why a backend without compaction would refuse this, or ""
	call       *toolCall

	// top holds the body's top-level fields, found in one pass: each gjson path lookup from the
	// root would rescan a multi-megabyte body.
	top      map[string]gjson.Result
	bodyHash [32]byte
}

type toolCall struct{ name, args string }

const conversationTag = "<conversation>"

func (c *call) parse() {
	body := c.body
	if c.route == routeModels || c.route == routeUnknown {
		return
	}
	// Depth-bounded validation first: gjson.ValidBytes recurses per nesting level, and a
	// deeply nested body (compactd's tests send them) would overflow the stack.
	if jsonx.Valid(body) != nil {
		return
	}
	p := &c.in
	p.valid = true
	p.bodyHash = sha256.Sum256(body)
	// A string view of the body, not gjson.ParseBytes's copy: the body is never written after
	// it is read, and a fresh multi-megabyte string per request was a tenth of the fake's CPU.
	p.top = topFields(gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))))
	root := p.top
	p.model = root["model"].String()
	p.stream = root["stream"].Bool()
	p.inputToks = estimateTokens(root)

	var users []string
	switch c.route {
	case routeResponses:
		users, p.toolResult = responsesUsers(root["input"])
		p.compaction = responsesCompaction(root)
	case routeChat:
		users, p.toolResult = chatUsers(root["messages"])
	case routeMessages, routeCountTokens:
		users, p.toolResult = messagesUsers(root["messages"])
		if c.route == routeMessages {
			p.compaction = messagesCompaction(root)
		}
	}
	if len(users) > 0 {
		p.lastUser = users[len(users)-1]
	}
	if c.route == routeCountTokens {
		return
	}
	for i := len(users) - 1; i >= 0; i-- {
		if t, ok := extractTranscript(users[i]); ok {
			p.summary, p.transcript = true, t
			return
		}
	}
	if !p.toolResult {
		p.call = parseCallDirective(p.lastUser)
	}
}

// responsesUsers returns the texts of the user messages in a Responses `input` (a string counts
// as one user message), and whether a function_call_output (or other tool output) follows the last.
func responsesUsers(input gjson.Result) (users []string, toolAfter bool) {
	if input.Type == gjson.String {
		return []string{input.Str}, false
	}
	input.ForEach(func(_, it gjson.Result) bool {
		typ := member(it, "type").Str
		if (typ == "" || typ == "message") && member(it, "role").Str == "user" {
			if t := contentText(member(it, "content")); t != "" {
				users = append(users, t)
				toolAfter = false
			}
			return true
		}
		if strings.HasSuffix(typ, "_output") { // function_call_output, custom_tool_call_output, …
			toolAfter = true
		}
		return true
	})
	return users, toolAfter
}

// chatUsers does the same for Chat Completions `messages`; a "tool" message is a tool result.
// compactd's handoff (a user message after the newest user messages it kept verbatim) is context
// to the model, not the user's request: the model acts on the newest request before it.
func chatUsers(msgs gjson.Result) (users []string, toolAfter bool) {
	msgs.ForEach(func(_, m gjson.Result) bool {
		switch member(m, "role").Str {
		case "user":
			if t := contentText(member(m, "content")); t != "" && !strings.HasPrefix(t, handoff.Prefix) {
				users = append(users, t)
				toolAfter = false
			}
		case "tool", "function":
			toolAfter = true
		}
		return true
	})
	return users, toolAfter
}

// messagesUsers does the same for Anthropic `messages`, where tool results are tool_result
// blocks inside a user message.
func messagesUsers(msgs gjson.Result) (users []string, toolAfter bool) {
	msgs.ForEach(func(_, m gjson.Result) bool {
		if member(m, "role").Str != "user" {
			return true
		}
		content := member(m, "content")
		hasResult := false
		content.ForEach(func(_, b gjson.Result) bool {
			if member(b, "type").Str == "tool_result" {
				hasResult = true
			}
			return !hasResult
		})
		if t := contentText(content); t != "" && !hasResult {
			users = append(users, t)
			toolAfter = false
		} else if hasResult {
			toolAfter = true
		}
		return true
	})
	return users, toolAfter
}

// contentText joins the text of a message content: a plain string, or the "text" of its parts
// (input_text, output_text, text), newline-separated.
func contentText(content gjson.Result) string {
	if content.Type == gjson.String {
		return content.Str
	}
	var b strings.Builder
	content.ForEach(func(_, part gjson.Result) bool {
		switch member(part, "type").Str {
		case "input_text", "output_text", "text", "":
			if t := member(part, "text"); t.Type == gjson.String {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(t.Str)
			}
		}
		return true
	})
	return b.String()
}

// responsesCompaction reports why a backend without compaction support would refuse the body.
func responsesCompaction(root map[string]gjson.Result) string {
	if root["context_management"].Exists() {
		return "Unsupported parameter: 'context_management'."
	}
	reason := ""
	root["input"].ForEach(func(_, it gjson.Result) bool {
		switch t := member(it, "type").Str; t {
		case "compaction_trigger", "compaction", "compaction_summary":
			reason = "Invalid input item type: '" + t + "'. This backend does not support compaction."
			return false
		}
		return true
	})
	return reason
}

// messagesCompaction is the Anthropic counterpart: a compaction content block, a compact_*
// context-management edit, or an on-demand "compaction" request.
func messagesCompaction(root map[string]gjson.Result) string {
	if root["compaction"].Exists() {
		return "compaction: Extra inputs are not permitted"
	}
	reason := ""
	root["context_management"].Get("edits").ForEach(func(_, e gjson.Result) bool {
		if t := member(e, "type").Str; strings.HasPrefix(t, "compact_") {
			reason = "context_management.edits: unsupported edit type '" + t + "'"
			return false
		}
		return true
	})
	if reason != "" {
		return reason
	}
	root["messages"].ForEach(func(i, m gjson.Result) bool {
		member(m, "content").ForEach(func(_, b gjson.Result) bool {
			if member(b, "type").Str == "compaction" {
				reason = "messages." + i.String() + ".content: unsupported content block type 'compaction'"
				return false
			}
			return true
		})
		return reason == ""
	})
	return reason
}

// topFields maps each top-level key of a JSON object to its value.
func topFields(root gjson.Result) map[string]gjson.Result {
	m := make(map[string]gjson.Result, 16)
	root.ForEach(func(k, v gjson.Result) bool {
		m[k.Str] = v
		return true
	})
	return m
}

// extractTranscript returns the text between <conversation> and </conversation> (or the end).
func extractTranscript(s string) (string, bool) {
	i := strings.Index(s, conversationTag)
	if i < 0 {
		return "", false
	}
	t := s[i+len(conversationTag):]
	if j := strings.Index(t, "</conversation>"); j >= 0 {
		t = t[:j]
	}
	return strings.Trim(t, "\r\n"), true
}

// callDirective is "[[call:NAME {json args}]]"; the args are optional and may span lines.
var callDirective = regexp.MustCompile(`(?s)\[\[call:([A-Za-z0-9_.\-]+)\s*(.*?)\]\]`)

// parseCallDirective finds the first whole directive in s. One whose args are not a JSON object
// is not a directive: a summary that quotes a user message cut short ("… [[call:read_fi") would
// otherwise run up to the next "]]" and call a tool of a made-up name.
func parseCallDirective(s string) *toolCall {
	for {
		loc := callDirective.FindStringSubmatchIndex(s)
		if loc == nil {
			return nil
		}
		args := strings.TrimSpace(s[loc[4]:loc[5]])
		if args == "" {
			args = "{}"
		}
		if gjson.Valid(args) && gjson.Parse(args).IsObject() {
			return &toolCall{name: s[loc[2]:loc[3]], args: args}
		}
		s = s[loc[0]+len("[[call:"):] // a later directive may start inside this one's false args
	}
}

// structuralKeys are JSON keys whose string values are protocol plumbing, not text the model
// would read, so they are left out of the token estimate.
var structuralKeys = map[string]bool{
	"type": true, "role": true, "id": true, "call_id": true, "status": true, "tool_use_id": true,
	"tool_call_id": true, "media_type": true, "detail": true, "signature": true, "encrypted_content": true,
	"cache_control": true, "phase": true,
}

// estimateTokens is a realistic input-token count: bytes of text content / 4, at least 1.
func estimateTokens(root map[string]gjson.Result) int64 {
	n := 0
	for _, k := range [...]string{"instructions", "input", "messages", "system", "tools"} {
		n += textLen(root[k])
	}
	return max(1, int64(n/4))
}

// textLen is the length of the text in r: every string value, unescaped, but those under a
// structural key. It is one linear scan of r's raw bytes with nothing decoded or allocated
// (gjson's ForEach unescaped every string of a multi-megabyte history into a new Go string, and
// walked each level again: 60% of the fake's CPU per 2 MB request, which made it the
// bottleneck of the growing side-by-side rows).
func textLen(r gjson.Result) int {
	js := r.Raw
	n := 0
	var inObj []bool // per open bracket: an object (a string after '{' or ',' is its key)
	key := false     // the next string is a key
	for i := 0; i < len(js); {
		switch js[i] {
		case '{':
			inObj, key = append(inObj, true), true
		case '[':
			inObj, key = append(inObj, false), false
		case '}', ']':
			if len(inObj) > 0 {
				inObj = inObj[:len(inObj)-1]
			}
			key = false
		case ',':
			key = len(inObj) > 0 && inObj[len(inObj)-1]
		case ':':
			key = false
		case '"':
			end, _ := jsonx.StringEnd(js, i)
			if key {
				if structuralKeys[js[i+1:max(i+1, end-1)]] {
					end, _ = jsonx.SkipMember(js, end) // plumbing: not text, whatever its shape
				}
				key = false
			} else {
				n += unescapedLen(js[i+1 : max(i+1, end-1)])
			}
			i = end
			continue
		}
		i++
	}
	return n
}

// unescapedLen is the length of the JSON string contents s (between the quotes) once decoded.
func unescapedLen(s string) int {
	if strings.IndexByte(s, '\\') < 0 {
		return len(s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			n++
			continue
		}
		i++
		if s[i] != 'u' {
			n++
			continue
		}
		r, ok := hex4(s, i+1)
		if !ok {
			n += 2 // kept as written
			continue
		}
		i += 4
		if utf16.IsSurrogate(r) {
			if r2, ok := hex4(s, i+3); ok && i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' && utf16.DecodeRune(r, r2) != utf8.RuneError {
				n += 4
				i += 6
				continue
			}
			r = utf8.RuneError
		}
		n += utf8.RuneLen(r)
	}
	return n
}

func hex4(s string, i int) (rune, bool) {
	if len(s)-i < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(s[i:i+4], 16, 32)
	return rune(v), err == nil
}

// outputTokens estimates the tokens of a generated text the same way.
func outputTokens(s string) int64 { return max(1, int64(len(s)/4)) }

// firstRunes returns at most n runes of s, never splitting a UTF-8 sequence.
func firstRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return s[:i]
}

// splitDeltas cuts s into at most n pieces of near-equal rune counts (fewer when s is shorter),
// always at least one piece so a stream carries at least one delta.
func splitDeltas(s string, n int) []string {
	runes := utf8.RuneCountInString(s)
	if n > runes {
		n = runes
	}
	if n <= 1 {
		return []string{s}
	}
	out := make([]string, 0, n)
	start, pos, r := 0, 0, 0
	for i := 1; i < n; i++ {
		target := i * runes / n
		for r < target {
			_, w := utf8.DecodeRuneInString(s[pos:])
			pos += w
			r++
		}
		out = append(out, s[start:pos])
		start = pos
	}
	return append(out, s[start:])
}

// member is r.Get(key) for a plain key (no path syntax) of the object r: one scan of r's members
// that skips each value by counting its brackets, where gjson's Get parses and unescapes every
// string it passes. An item's "type" often comes after its content (a client that marshals a
// map sorts its keys), so each Get of a multi-megabyte history's items walked its text again.
// A key written with escapes sends the lookup to gjson, which compares keys decoded.
func member(r gjson.Result, key string) gjson.Result {
	js := r.Raw
	i := 0
	for i < len(js) && isJSONSpace(js[i]) {
		i++
	}
	if i == len(js) || js[i] != '{' {
		return gjson.Result{}
	}
	var res gjson.Result
	escaped := false
	// A read-only view of the raw text (gjson's strings are never written): jsonx skips
	// strings eight bytes at a time.
	obj := unsafe.Slice(unsafe.StringData(js[i:]), len(js)-i)
	jsonx.Members(obj, func(k []byte, start, end int) bool {
		if bytes.IndexByte(k, '\\') >= 0 {
			escaped = true
			return false
		}
		if string(k) != key {
			return true
		}
		res = gjson.Parse(js[i+start : i+end])
		if r.Index > 0 {
			res.Index = r.Index + i + start
		}
		return false
	})
	if escaped {
		return r.Get(key)
	}
	return res
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }
