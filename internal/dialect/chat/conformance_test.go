package chat

import (
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/turn/turntest"
)

// history is an agent conversation in Chat Completions messages: a system prompt, a user
// request, then rounds of an assistant tool call, its (large) tool output and an answer.
func history() []string {
	out := []string{
		`{"role":"system","content":"You are a careful coding agent."}`,
		`{"role":"user","content":"Fix the failing test in internal/api."}`,
	}
	for i := 0; i < 6; i++ {
		id := "call_" + string(rune('a'+i))
		out = append(out,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"`+id+`","type":"function","function":{"name":"shell","arguments":"{\"cmd\":\"go test ./...\"}"}}]}`,
			`{"role":"tool","tool_call_id":"`+id+`","content":"`+strings.Repeat(`ok  \tgithub.com/x/y\t0.1s `, 60)+`"}`,
			`{"role":"assistant","content":"Step done."}`,
		)
	}
	return out
}

// body is a request of msgs, with odd spacing and a field compactd does not know: nothing of
// them may be normalised.
func body(msgs []string) []byte {
	return []byte(`{ "model":"gpt-test", "x_unknown":{"a":[1,2]},"messages":[` + strings.Join(msgs, ",") + `] ,"temperature":0.5}`)
}

const newMessage = `{"role":"user","content":"Now run the linter."}`

func next(long []string) []string { return append(long[:len(long):len(long)], newMessage) }

func TestConformance(t *testing.T) {
	long := history()
	// Chat has no compaction on the wire (no Carry) and puts nothing into its answers (no
	// JSON or SSE checks): its compactions are transparent only.
	turntest.Run(t, Adapter{}, turntest.Fixture{
		Plain: body(long[:2]),
		Long:  body(long),
		Next:  body(next(long)),
	})
}
