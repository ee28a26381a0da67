package compact

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/handoff"
)

// item builds an api.Item the way api's skimmer does: Type "message" for easy messages.
func item(raw string) api.Item {
	v := gjson.Parse(raw)
	typ := v.Get("type").Str
	if typ == "" && v.Get("role").Exists() {
		typ = "message"
	}
	return api.Item{Raw: []byte(raw), Type: typ, Role: v.Get("role").Str}
}

func TestRenderEntry(t *testing.T) {
	cases := []struct {
		name, raw, want string
	}{
		{"codex user message", `{"type":"message","id":"msg_01a2","role":"user","content":[{"type":"input_text","text":"hello first turn"}],"internal_chat_message_metadata_passthrough":{"turn_id":"01a2","content_item_kinds":["user.text"]}}`,
			"[user] hello first turn"},
		{"assistant output_text", `{"type":"message","status":"completed","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"MOCK-REPLY 1","annotations":[]}]}`,
			"[assistant] MOCK-REPLY 1"},
		{"easy message without type", `{"role":"user","content":"fix the failing test"}`,
			"[user] fix the failing test"},
		{"developer parts joined", `{"type":"message","role":"developer","content":[{"type":"input_text","text":"<skills>"},{"type":"input_text","text":"<permissions>"}]}`,
			"[developer] <skills>\n<permissions>"},
		{"refusal", `{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"I can't help with that."}]}`,
			"[assistant] [refusal] I can't help with that."},
		{"image and file", `{"type":"message","role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","detail":"auto","image_url":"data:image/png;base64,iVBORw0KGgo="},{"type":"input_file","filename":"report.pdf","file_data":"JVBERi0="}]}`,
			"[user] look\n[image]\n[file report.pdf]"},
		{"function call", `{"type":"function_call","id":"fc_1","call_id":"call_abc","name":"exec_command","arguments":"{\"cmd\":\"go test ./...\",\"workdir\":\"/home/dev/project\"}"}`,
			`[tool call] exec_command({"cmd":"go test ./...","workdir":"/home/dev/project"})`},
		{"function output string", `{"type":"function_call_output","call_id":"call_abc","output":"ok  \tgithub.com/x/y\t0.01s\n"}`,
			"[tool output call_abc] ok  \tgithub.com/x/y\t0.01s\n"},
		{"function output array", `{"type":"function_call_output","call_id":"call_img","output":[{"type":"input_text","text":"screenshot:"},{"type":"input_image","image_url":"https://example.invalid/a.png"}]}`,
			"[tool output call_img] screenshot:\n[image]"},
		{"custom tool call", `{"type":"custom_tool_call","id":"ctc_1","call_id":"call_p","name":"apply_patch","input":"*** Begin Patch\n*** Update File: main.go\n@@\n-old\n+new\n*** End Patch"}`,
			"[tool call] apply_patch(*** Begin Patch\n*** Update File: main.go\n@@\n-old\n+new\n*** End Patch)"},
		{"custom tool output", `{"type":"custom_tool_call_output","call_id":"call_p","output":"Success. Updated the following files:\nM main.go"}`,
			"[tool output call_p] Success. Updated the following files:\nM main.go"},
		{"local shell call", `{"type":"local_shell_call","id":"lsh_1","call_id":"call_s","status":"completed","action":{"type":"exec","command":["bash","-lc","grep -rn TODO ."],"env":{},"working_directory":"/home/dev/project"}}`,
			"[tool call] local_shell(bash -lc 'grep -rn TODO .') in /home/dev/project"},
		{"local shell output", `{"type":"local_shell_call_output","id":"call_s","output":"main.go:12: // TODO"}`,
			"[tool output call_s] main.go:12: // TODO"},
		{"reasoning summary only", `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"**Planning**"},{"type":"summary_text","text":"Run tests first."}],"content":[{"type":"reasoning_text","text":"hidden chain"}],"encrypted_content":"gAAAAABsecret"}`,
			"[reasoning] **Planning**\nRun tests first."},
		{"reasoning without summary", `{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"gAAAAABsecret"}`,
			"[reasoning]"},
		{"web search", `{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"zstd max window size"}}`,
			`[web search] search "zstd max window size"`},
		{"web open page", `{"type":"web_search_call","id":"ws_2","status":"completed","action":{"type":"open_page","url":"https://pkg.go.dev/x"}}`,
			"[web search] open https://pkg.go.dev/x"},
		{"unknown type compact JSON without secrets", `{"type":"image_generation_call","id":"ig_1","status":"completed",  "result":"abc", "encrypted_content":"zzz"}`,
			`[image_generation_call] {"type":"image_generation_call","status":"completed","result":"abc"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := RenderEntry(item(tc.raw))
			if got != tc.want {
				t.Errorf("RenderEntry =\n%q\nwant\n%q", got, tc.want)
			}
			if strings.Contains(got, "gAAAA") || strings.Contains(got, "zzz") {
				t.Error("ciphertext leaked into the transcript")
			}
			if again := RenderEntry(item(tc.raw)); again != got {
				t.Error("not deterministic")
			}
		})
	}
}

func TestRenderEntries(t *testing.T) {
	items := []api.Item{
		item(`{"type":"message","role":"developer","content":"rules"}`),
		item(`{"type":"message","role":"user","content":"a"}`),
		item(`{"type":"message","role":"assistant","content":"b"}`),
	}
	got := RenderEntries(items, []int{1, 2})
	if want := []string{"[user] a", "[assistant] b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RenderEntries = %q, want %q", got, want)
	}
}

// The summariser never re-reads compactd's facts ledger inside an earlier summary: compactd
// carries it itself, and a summary that restated it would spend its budget on kept facts. The
// rendering is the same whether the ledger ends in a newline or not (a gap check's findings end
// without one), so equal summaries give the summariser equal input.
func TestRenderEntryLeavesOutTheCarriedLedger(t *testing.T) {
	plain := ledgerOf(lUser("Let's keep the old API 3."))
	withGap := WithGapFindings(plain, "- the flag is --dry-run")
	agent := "This session is being continued.\n<summary>\nwork so far\n" + plain + "\n</summary>"
	cases := []struct {
		name string
		it   api.Item
		want string // the rendering must end with this
	}{
		{"handoff", api.Item{Raw: api.UserMessage(handoff.Text("S: 1", plain)), Type: "message", Role: "user", Handoff: true}, "S: 1\n</summary>\n\n<facts>\nExact facts from the compacted part, kept verbatim:\n" + ledgerNote + "\n</facts>"},
		{"handoff with gap findings", api.Item{Raw: api.UserMessage(handoff.Text("S: 1", withGap)), Type: "message", Role: "user", Handoff: true}, "S: 1\n</summary>\n\n<facts>\nExact facts from the compacted part, kept verbatim:\n" + ledgerNote + "\n</facts>"},
		{"an agent's summary compactd wrote", item(lUser(agent)), "work so far\n" + ledgerNote + "\n</summary>"},
	}
	for _, tc := range cases {
		got := RenderEntry(tc.it)
		if !strings.HasSuffix(got, tc.want) || strings.Contains(got, "keep the old API") || strings.Contains(got, "dry-run") {
			t.Errorf("%s: %q, want it to end %q without the ledger's facts", tc.name, got, tc.want)
		}
	}
}
