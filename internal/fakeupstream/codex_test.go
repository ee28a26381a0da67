package fakeupstream

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fixtures"
)

// TestCodexFixtures replays the bodies Codex CLI 0.169 really sent: an ordinary turn is answered,
// and a remote (v2) compaction turn is refused the way a backend without compaction refuses it.
// The captures are embedded in internal/fixtures, so the test runs in every clone.
func TestCodexFixtures(t *testing.T) {
	cases := []struct {
		file   string
		status int
		check  func(t *testing.T, sse []byte)
	}{
		{"normal_turn_request.json", 200, func(t *testing.T, sse []byte) {
			done := lastData(sse)
			if gjson.GetBytes(done, "type").String() != "response.completed" ||
				gjson.GetBytes(done, "response.output.0.content.0.text").String() != "MOCK-REPLY 1: hello first turn" ||
				gjson.GetBytes(done, "response.usage.input_tokens").Int() < 100 { // several kB of instructions
				t.Errorf("completed event %s", done)
			}
		}},
		{"remote_v2_compaction_request.json", 400, nil},
		{"remote_v2_post_compaction_turn_request.json", 400, nil}, // carries the compaction item back
	}
	_, base := start(t, Options{})
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			raw := fixtures.Codex(tc.file)
			status, _, body := post(t, base+gjson.GetBytes(raw, "path").String(), gjson.GetBytes(raw, "body").Raw)
			if status != tc.status {
				t.Fatalf("status %d: %.300s", status, body)
			}
			if tc.check != nil {
				tc.check(t, body)
			}
		})
	}
}

// lastData returns the data of the last event of an SSE body that has data.
func lastData(stream []byte) []byte {
	datas, _ := eventDatas(stream)
	if len(datas) == 0 {
		return nil
	}
	return datas[len(datas)-1]
}
