package agenthooks

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const exe = "/opt/bin/compactd"

// userSettings is a settings.json with other settings and a user's own hooks, in an order that a
// map-based rewrite would change.
const userSettings = `{
  "model": "opus",
  "permissions": {"allow": ["Bash(go test:*)"], "deny": []},
  "hooks": {
    "PreCompact": [{"matcher": "manual", "hooks": [{"type": "command", "command": "notify-send compacting", "timeout": 5}]}],
    "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]
  },
  "env": {"FOO": "bar"},
  "unknownFutureSetting": [1, 2, {"x": null}]
}
`

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return v
}

func TestInstallUninstall(t *testing.T) {
	for _, tc := range []struct {
		name     string
		agent    Agent
		initial  string // "" = no file
		guard    bool
		wantEvts []string
	}{
		{"claude into existing settings", Claude, userSettings, false, []string{"PreCompact", "SessionStart"}},
		{"claude with guard", Claude, userSettings, true, []string{"PreCompact", "PreToolUse", "SessionStart"}},
		{"claude, no file yet", Claude, "", false, []string{"PreCompact", "SessionStart"}},
		{"codex hooks.json", Codex, `{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}`, false, []string{"SessionStart"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "settings.json")
			if tc.initial != "" {
				writeFile(t, path, tc.initial)
			}
			ch, err := Install(path, tc.agent, exe, tc.guard)
			if err != nil || !ch.Changed {
				t.Fatalf("Install = %+v, %v", ch, err)
			}
			first := read(t, path)
			// Idempotent: a second install changes nothing, byte for byte.
			ch, err = Install(path, tc.agent, exe, tc.guard)
			if err != nil || ch.Changed {
				t.Fatalf("second Install = %+v, %v", ch, err)
			}
			if got := read(t, path); got != first {
				t.Fatalf("second install rewrote the file:\n%s\nthen\n%s", first, got)
			}
			// Other settings and the user's own hooks survive, in their order.
			if tc.initial == userSettings {
				for _, want := range []string{`"model": "opus"`, `"notify-send compacting"`, `"say done"`, `"FOO": "bar"`, `"unknownFutureSetting"`} {
					if !strings.Contains(first, want) {
						t.Errorf("install lost %s:\n%s", want, first)
					}
				}
				if strings.Index(first, `"model"`) > strings.Index(first, `"permissions"`) || strings.Index(first, `"env"`) > strings.Index(first, `"unknownFutureSetting"`) {
					t.Errorf("install reordered the top-level settings:\n%s", first)
				}
			}
			// Status reports exactly our hooks.
			st, err := Status(path)
			if err != nil {
				t.Fatal(err)
			}
			var evts []string
			for _, h := range Hooks(tc.agent, tc.guard) {
				if len(st[h.Event]) != 1 || st[h.Event][0] != Command(exe, tc.agent, h.Event) {
					t.Errorf("Status[%s] = %q", h.Event, st[h.Event])
				}
				evts = append(evts, h.Event)
			}
			if len(st) != len(tc.wantEvts) {
				t.Errorf("Status = %v, want events %v", st, tc.wantEvts)
			}
			// Uninstall restores the original settings (as JSON values).
			ch, err = Uninstall(path)
			if err != nil || !ch.Changed {
				t.Fatalf("Uninstall = %+v, %v", ch, err)
			}
			want := "{}"
			if tc.initial != "" {
				want = tc.initial
			}
			if got := read(t, path); !reflect.DeepEqual(decode(t, got), decode(t, want)) {
				t.Errorf("uninstall did not restore the settings:\ngot  %s\nwant %s", got, want)
			}
			if st, _ := Status(path); len(st) != 0 {
				t.Errorf("Status after uninstall = %v", st)
			}
			if ch, err := Uninstall(path); err != nil || ch.Changed {
				t.Errorf("second Uninstall = %+v, %v", ch, err)
			}
			_ = evts
		})
	}
}

func TestInstallReplacesOlderBinaryPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	if _, err := Install(path, Claude, "/old/compactd", true); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(path, Claude, exe, false); err != nil {
		t.Fatal(err)
	}
	got := read(t, path)
	if strings.Contains(got, "/old/compactd") || strings.Contains(got, "PreToolUse") {
		t.Errorf("the earlier install was not replaced:\n%s", got)
	}
	if strings.Count(got, "hooks run claude") != 2 {
		t.Errorf("want exactly PreCompact and SessionStart:\n%s", got)
	}
}

func TestInstallRefusesBrokenSettings(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":      `{"model": "opus",`,
		"not an object": `[1, 2]`,
		"too deep":      strings.Repeat("[", 2000) + strings.Repeat("]", 2000),
		"hooks not obj": `{"hooks": [1]}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "settings.json")
			writeFile(t, path, content)
			if _, err := Install(path, Claude, exe, false); err == nil {
				t.Fatal("Install accepted broken settings")
			}
			if got := read(t, path); got != content {
				t.Errorf("a failed install changed the file: %q", got)
			}
		})
	}
}

func TestSettingsPath(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		a    Agent
		s    Scope
		env  map[string]string
		want string
	}{
		{Claude, ScopeUser, nil, "/h/.claude/settings.json"},
		{Claude, ScopeUser, map[string]string{"CLAUDE_CONFIG_DIR": "/c"}, "/c/settings.json"},
		{Claude, ScopeProject, nil, "/p/.claude/settings.json"},
		{Codex, ScopeUser, nil, "/h/.codex/hooks.json"},
		{Codex, ScopeUser, map[string]string{"CODEX_HOME": "/x"}, "/x/hooks.json"},
		{Codex, ScopeProject, nil, "/p/.codex/hooks.json"},
	} {
		got, err := SettingsPath(tc.a, tc.s, "/h", "/p", env(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("SettingsPath(%s, %s) = %q, %v; want %q", tc.a, tc.s, got, err, tc.want)
		}
	}
}

func TestCommandQuoting(t *testing.T) {
	for _, tc := range []struct{ exe, want string }{
		{"/usr/local/bin/compactd", "/usr/local/bin/compactd hooks run claude PreCompact"},
		{"/Users/me/My Tools/compactd", "'/Users/me/My Tools/compactd' hooks run claude PreCompact"},
		{"/tmp/it's/compactd", `'/tmp/it'\''s/compactd' hooks run claude PreCompact`},
	} {
		got := Command(tc.exe, Claude, "PreCompact")
		if got != tc.want {
			t.Errorf("Command(%q) = %q, want %q", tc.exe, got, tc.want)
		}
		if !isOurs(got) {
			t.Errorf("isOurs(%q) = false", got)
		}
	}
	if isOurs("my-script hooks run claude PreCompact") || isOurs("notify-send compacting") {
		t.Error("isOurs claims a command compactd did not write")
	}
}

// TestObjectRoundTrip: parsing and re-marshalling keeps keys in order and values byte-exact.
func TestObjectRoundTrip(t *testing.T) {
	in := `{"b":1,"a":{"z":[1,2],"y":"é"},"c":null}`
	o, err := parseObject([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := o.marshal(); !bytes.Equal(got, []byte(in)) {
		t.Errorf("round trip = %s", got)
	}
}
