// Package agenthooks connects compactd to coding agents that are not routed through the proxy:
// it installs command hooks into Claude Code's settings.json and Codex's hooks.json, and it is
// the hook runtime those commands call (`compactd hooks run AGENT EVENT`).
//
// The hook and settings shapes are the ones the agents' own releases ship (read from Claude Code
// 2.1.332's bundled schemas and Codex 0.169.0's embedded JSON schemas, not guessed):
//
//	{"hooks": {"PreCompact": [{"matcher": "", "hooks": [{"type": "command", "command": "…", "timeout": 30}]}]}}
//
// timeout is in seconds. Both agents read the same shape; Codex keeps it in hooks.json.
package agenthooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/compactd/compactd/internal/jsonx"
)

// Agent names a supported coding agent.
type Agent string

const (
	Claude Agent = "claude"
	Codex  Agent = "codex"
)

// ParseAgent maps a command-line word to an Agent.
func ParseAgent(s string) (Agent, error) {
	switch strings.ToLower(s) {
	case "claude", "claude-code":
		return Claude, nil
	case "codex":
		return Codex, nil
	}
	return "", fmt.Errorf("unknown agent %q (want claude or codex)", s)
}

// Scope is where the hooks are installed: for the user (every project) or one project.
type Scope string

const (
	ScopeUser    Scope = "user"
	ScopeProject Scope = "project"
)

// SettingsPath is the file Install edits. Claude Code: $CLAUDE_CONFIG_DIR/settings.json (default
// ~/.claude) or <project>/.claude/settings.json. Codex: $CODEX_HOME/hooks.json (default ~/.codex)
// or <project>/.codex/hooks.json. getenv is os.Getenv outside tests.
func SettingsPath(a Agent, s Scope, home, project string, getenv func(string) string) (string, error) {
	switch {
	case a == Claude && s == ScopeUser:
		if d := getenv("CLAUDE_CONFIG_DIR"); d != "" {
			return filepath.Join(d, "settings.json"), nil
		}
		return filepath.Join(home, ".claude", "settings.json"), nil
	case a == Claude && s == ScopeProject:
		return filepath.Join(project, ".claude", "settings.json"), nil
	case a == Codex && s == ScopeUser:
		if d := getenv("CODEX_HOME"); d != "" {
			return filepath.Join(d, "hooks.json"), nil
		}
		return filepath.Join(home, ".codex", "hooks.json"), nil
	case a == Codex && s == ScopeProject:
		return filepath.Join(project, ".codex", "hooks.json"), nil
	}
	return "", fmt.Errorf("unknown agent %q or scope %q", a, s)
}

// Hook is one command hook compactd installs.
type Hook struct {
	Event   string // PreCompact, SessionStart, PreToolUse
	Matcher string // "" matches everything
	Timeout int    // seconds, as the agents read it
}

// GuardTools are the Claude Code tools the PreToolUse guard denies while a handover is being
// prepared: the ones that write files.
const GuardTools = "Edit|MultiEdit|Write|NotebookEdit"

// Hooks lists what Install writes for an agent. The timeouts are the agent-side kill limits;
// the hook's own bound (see RunOptions) is lower so that it always answers before being killed.
func Hooks(a Agent, guard bool) []Hook {
	if a == Codex {
		// Codex's PreCompact cannot inject anything, so only SessionStart is worth a hook.
		return []Hook{{Event: "SessionStart", Matcher: "", Timeout: 30}}
	}
	hs := []Hook{
		{Event: "PreCompact", Matcher: "", Timeout: 60},
		{Event: "SessionStart", Matcher: "compact", Timeout: 30},
	}
	if guard {
		hs = append(hs, Hook{Event: "PreToolUse", Matcher: GuardTools, Timeout: 30})
	}
	return hs
}

// Command is the shell command line of a hook: the compactd binary (single-quoted when it needs
// it) followed by `hooks run AGENT EVENT`. Claude Code rejects `$` and backticks in some hook
// commands, so nothing is expanded.
func Command(exe string, a Agent, event string) string {
	return shellQuote(exe) + " hooks run " + string(a) + " " + event
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isOurs recognises a hook command compactd wrote: `… hooks run claude|codex EVENT` from a
// binary whose name starts with compactd.
func isOurs(command string) bool {
	i := strings.Index(command, " hooks run ")
	if i < 0 {
		return false
	}
	exe := strings.Trim(command[:i], `'"`)
	return strings.HasPrefix(filepath.Base(exe), "compactd")
}

// member is one key of a JSON object, kept in file order with its value's bytes.
type member struct {
	key string
	val json.RawMessage
}

type object []member

func (o object) get(k string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.key == k {
			return m.val, true
		}
	}
	return nil, false
}

func (o object) set(k string, v json.RawMessage) object {
	for i := range o {
		if o[i].key == k {
			o[i].val = v
			return o
		}
	}
	return append(o, member{k, v})
}

func (o object) del(k string) object {
	return slices.DeleteFunc(o, func(m member) bool { return m.key == k })
}

func (o object) marshal() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// parseObject reads a JSON object keeping key order and raw values; other settings are carried
// through byte for byte (modulo indentation).
func parseObject(data []byte) (object, error) {
	if err := jsonx.CheckDepth(data, jsonx.MaxDepth); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o = o.set(k, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return o, nil
}

// maxSettingsBytes bounds the settings file read; real ones are a few KB.
const maxSettingsBytes = 8 << 20

func readSettings(path string) (object, fs.FileMode, bool, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0o644, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	if info.Size() > maxSettingsBytes {
		return nil, 0, false, fmt.Errorf("%s: %d bytes is too large for a settings file", path, info.Size())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, false, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, info.Mode().Perm(), true, nil
	}
	o, err := parseObject(data)
	if err != nil {
		return nil, 0, false, fmt.Errorf("%s: %w (fix or move it; compactd will not overwrite it)", path, err)
	}
	return o, info.Mode().Perm(), true, nil
}

// removeOurs drops compactd's hook commands from a settings object, and groups, events and the
// hooks object that are left empty by that. It reports what it removed (event names).
func removeOurs(o object) (object, []string, error) {
	raw, ok := o.get("hooks")
	if !ok {
		return o, nil, nil
	}
	events, err := parseObject(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("\"hooks\": %w", err)
	}
	var removed []string
	var keep object
	for _, ev := range events {
		var groups []json.RawMessage
		if json.Unmarshal(ev.val, &groups) != nil {
			keep = append(keep, ev) // not ours to judge
			continue
		}
		var left []json.RawMessage
		touched := false
		for _, g := range groups {
			gobj, err := parseObject(g)
			if err != nil {
				left = append(left, g)
				continue
			}
			hraw, _ := gobj.get("hooks")
			var hooks []json.RawMessage
			if json.Unmarshal(hraw, &hooks) != nil {
				left = append(left, g)
				continue
			}
			var hleft []json.RawMessage
			for _, h := range hooks {
				var cmd struct {
					Command string `json:"command"`
				}
				if json.Unmarshal(h, &cmd) == nil && isOurs(cmd.Command) {
					touched = true
					continue
				}
				hleft = append(hleft, h)
			}
			switch {
			case len(hleft) == len(hooks):
				left = append(left, g)
			case len(hleft) > 0:
				b, _ := json.Marshal(hleft)
				left = append(left, gobj.set("hooks", b).marshal())
			}
		}
		if touched {
			removed = append(removed, ev.key)
		}
		switch {
		case !touched:
			keep = append(keep, ev)
		case len(left) > 0:
			b, _ := json.Marshal(left)
			keep = append(keep, member{ev.key, b})
		}
	}
	if len(keep) == 0 {
		return o.del("hooks"), removed, nil
	}
	return o.set("hooks", keep.marshal()), removed, nil
}

// Change is what Install or Uninstall did to one file.
type Change struct {
	Path    string
	Changed bool
	Events  []string // events that carry a compactd hook after the call (Install) or lost one (Uninstall)
}

// Install writes compactd's hooks for agent a into the settings file at path, replacing any
// earlier compactd hooks and keeping every other setting and hook as it was. Running it twice
// changes nothing the second time.
func Install(path string, a Agent, exe string, guard bool) (Change, error) {
	o, mode, _, err := readSettings(path)
	if err != nil {
		return Change{}, err
	}
	before := o.marshal()
	o, _, err = removeOurs(o)
	if err != nil {
		return Change{}, err
	}
	var events object
	if raw, ok := o.get("hooks"); ok {
		if events, err = parseObject(raw); err != nil {
			return Change{}, err
		}
	}
	ch := Change{Path: path}
	for _, h := range Hooks(a, guard) {
		var groups []json.RawMessage
		if raw, ok := events.get(h.Event); ok {
			if err := json.Unmarshal(raw, &groups); err != nil {
				return Change{}, fmt.Errorf("hooks.%s is not a list: %w", h.Event, err)
			}
		}
		g, _ := json.Marshal(struct {
			Matcher string `json:"matcher"`
			Hooks   []any  `json:"hooks"`
		}{h.Matcher, []any{struct {
			Type    string `json:"type"`
			Command string `json:"command"`
			Timeout int    `json:"timeout"`
		}{"command", Command(exe, a, h.Event), h.Timeout}}})
		groups = append(groups, g)
		b, _ := json.Marshal(groups)
		events = events.set(h.Event, b)
		ch.Events = append(ch.Events, h.Event)
	}
	o = o.set("hooks", events.marshal())
	if sameJSON(before, o.marshal()) {
		return ch, nil
	}
	ch.Changed = true
	return ch, writeSettings(path, o, mode)
}

// sameJSON compares two JSON texts ignoring insignificant whitespace: the file's values are
// indented, the rebuilt ones compact.
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// Uninstall removes compactd's hooks from the settings file at path and nothing else.
func Uninstall(path string) (Change, error) {
	o, mode, exists, err := readSettings(path)
	if err != nil || !exists {
		return Change{Path: path}, err
	}
	o, removed, err := removeOurs(o)
	if err != nil || len(removed) == 0 {
		return Change{Path: path}, err
	}
	return Change{Path: path, Changed: true, Events: removed}, writeSettings(path, o, mode)
}

// Status lists the events of the settings file at path that carry a compactd hook, with their
// commands.
func Status(path string) (map[string][]string, error) {
	o, _, _, err := readSettings(path)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	raw, ok := o.get("hooks")
	if !ok {
		return out, nil
	}
	var events map[string][]struct {
		Hooks []struct {
			Command string `json:"command"`
		} `json:"hooks"`
	}
	if json.Unmarshal(raw, &events) != nil {
		return out, nil
	}
	for ev, groups := range events {
		for _, g := range groups {
			for _, h := range g.Hooks {
				if isOurs(h.Command) {
					out[ev] = append(out[ev], h.Command)
				}
			}
		}
	}
	return out, nil
}

// writeSettings writes o indented, through a temp file and a rename so the agent never reads
// half a file, keeping the file's permissions.
func writeSettings(path string, o object, mode fs.FileMode) error {
	var b bytes.Buffer
	if err := json.Indent(&b, o.marshal(), "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b.Bytes())
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), mode)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
	}
	return werr
}
