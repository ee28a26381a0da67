package fakeupstream

import (
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
)

// Answerer makes the fake model read its context, for measurements (compactd eval) whose score
// must reflect what compactd actually delivered upstream rather than what the test planted.
//
// It is given the last user message of an ordinary turn and the text of everything the request
// carried (instructions, every message and tool output, the question included), and returns:
//
//	ok = false          not a question it handles: the fake answers its usual MOCK-REPLY
//	answer != ""        the value it found in context: the fake replies exactly that
//	answer == ""        nothing found; query is what a model would search for
//
// When nothing is found, the request offers a recall tool (a function tool whose name contains
// "recall") and no tool result has come back since the question, the fake calls that tool with
// {"query": query}; otherwise it replies "unknown". After the tool result it reads the context
// again, excerpts included.
type Answerer func(question, context string) (answer, query string, ok bool)

// Unknown is the fake model's reply to a question whose answer is not in its context.
const Unknown = "unknown"

// answerTurn applies Options.Answer to an ordinary turn.
func (c *call) answerTurn() (text string, fc *toolCall, ok bool) {
	ans := c.srv.opt.Answer
	if ans == nil || c.in.lastUser == "" {
		return "", nil, false
	}
	// The walk below recurses; the fake is a test double but still never walks unbounded JSON.
	if jsonx.CheckDepth(c.body, jsonx.MaxDepth) != nil {
		return "", nil, false
	}
	answer, query, ok := ans(c.in.lastUser, c.contextText())
	switch {
	case !ok:
		return "", nil, false
	case answer != "":
		return answer, nil, true
	}
	if tool := c.recallTool(); tool != "" && !c.in.toolResult && query != "" {
		args, _ := json.Marshal(map[string]string{"query": query})
		return "", &toolCall{name: tool, args: string(args)}, true
	}
	return Unknown, nil, true
}

// contextText is every string the model would read, newline-separated: instructions, system,
// input or messages. Protocol plumbing (ids, types, encrypted blobs) is left out.
func (c *call) contextText() string {
	var b strings.Builder
	for _, k := range [...]string{"instructions", "system", "input", "messages"} {
		walkStrings(c.in.top[k], &b)
	}
	return b.String()
}

// RequestText is the text a model reads of a request body (what the fake's Answerer is given):
// every string of its instructions, system, input or messages, one a line, protocol plumbing
// (structuralKeys) left out. A body deeper than jsonx.MaxDepth gives "": the walk recurses.
func RequestText(body []byte) string {
	if jsonx.CheckDepth(body, jsonx.MaxDepth) != nil {
		return ""
	}
	root := gjson.ParseBytes(body)
	var b strings.Builder
	for _, k := range [...]string{"instructions", "system", "input", "messages"} {
		walkStrings(root.Get(k), &b)
	}
	return b.String()
}

// Text is every string of one JSON document the way RequestText reads a request: one a line,
// plumbing left out, "" past jsonx.MaxDepth.
func Text(doc []byte) string {
	if jsonx.CheckDepth(doc, jsonx.MaxDepth) != nil {
		return ""
	}
	var b strings.Builder
	walkStrings(gjson.ParseBytes(doc), &b)
	return b.String()
}

func walkStrings(r gjson.Result, b *strings.Builder) {
	switch {
	case r.Type == gjson.String:
		b.WriteString(r.Str)
		b.WriteByte('\n')
	case r.IsObject():
		r.ForEach(func(k, v gjson.Result) bool {
			if !structuralKeys[k.Str] {
				walkStrings(v, b)
			}
			return true
		})
	case r.IsArray():
		r.ForEach(func(_, v gjson.Result) bool {
			walkStrings(v, b)
			return true
		})
	}
}

// recallTool returns the name of the first offered function tool whose name contains "recall".
func (c *call) recallTool() string {
	name := ""
	c.in.top["tools"].ForEach(func(_, t gjson.Result) bool {
		n := member(t, "name").Str
		if n == "" {
			n = t.Get("function.name").Str // Chat Completions tools
		}
		if strings.Contains(n, "recall") {
			name = n
		}
		return name == ""
	})
	return name
}
