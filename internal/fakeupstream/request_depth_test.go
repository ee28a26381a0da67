package fakeupstream

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The fake reads request bodies with gjson; a deeply nested body must be a 400, not a stack
// overflow that takes the test binary down (gjson.ValidBytes recursed once per level). The stack
// limit is lowered so that the old code fails on a 2 MB body.
func TestDeeplyNestedBody(t *testing.T) {
	old := debug.SetMaxStack(8 << 20)
	defer debug.SetMaxStack(old)
	_, base := start(t, Options{})
	bodies := map[string]string{
		"arrays":  strings.Repeat("[", 2<<20) + strings.Repeat("]", 2<<20),
		"objects": `{"model":"m","input":` + strings.Repeat(`{"a":`, 400_000) + "1" + strings.Repeat("}", 400_001),
	}
	for _, path := range []string{"/v1/responses", "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"} {
		for name, body := range bodies {
			if status, _, _ := post(t, base+path, body); status != 400 {
				t.Errorf("%s, nested %s: status %d, want 400", path, name, status)
			}
		}
	}
}
