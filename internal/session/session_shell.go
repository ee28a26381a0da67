package session

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/compactd/compactd/internal/agentlog"
)

// heredocRe finds the delimiter word of a here-document (<<EOF, <<'EOF', <<-"EOF").
var heredocRe = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

// redirectFiles lists the files a shell command writes through output redirection (> and >>,
// optionally with fd 1) and tee. Here-document bodies are skipped (their text is file content, not
// shell), quotes are respected, and /dev/* targets and fd duplications (2>&1) are ignored. It is a
// heuristic for the "files modified" list, not a shell parser: sed -i, mv and cp are not tracked.
func redirectFiles(cmd string) []string {
	var files []string
	lines := strings.Split(cmd, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		files = append(files, redirectsInLine(line)...)
		if m := heredocRe.FindStringSubmatch(line); m != nil {
			for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != m[1] {
				i++
			}
			i++ // the delimiter line itself
		}
	}
	return files
}

func redirectsInLine(line string) []string {
	words := shellWords(line)
	var files []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w.quoted {
			continue
		}
		switch {
		case w.text == ">" || w.text == ">>" || w.text == "1>" || w.text == "1>>" || w.text == ">|":
			if i+1 < len(words) {
				files = appendTarget(files, words[i+1].text)
				i++
			}
		case strings.HasPrefix(w.text, ">>") || strings.HasPrefix(w.text, "1>>"):
			files = appendTarget(files, strings.TrimPrefix(strings.TrimPrefix(w.text, "1"), ">>"))
		case strings.HasPrefix(w.text, ">") || strings.HasPrefix(w.text, "1>"):
			files = appendTarget(files, strings.TrimPrefix(strings.TrimPrefix(w.text, "1"), ">"))
		case w.text == "tee":
			for j := i + 1; j < len(words); j++ {
				t := words[j]
				if !t.quoted && (t.text == "|" || t.text == ";" || t.text == "&&" || t.text == "||") {
					break
				}
				if !t.quoted && strings.HasPrefix(t.text, "-") {
					continue
				}
				files = appendTarget(files, t.text)
			}
		}
	}
	return files
}

func appendTarget(files []string, t string) []string {
	if t == "" || strings.HasPrefix(t, "&") || strings.HasPrefix(t, "/dev/") || strings.ContainsAny(t, "$`(") {
		return files
	}
	return append(files, t)
}

type shellWord struct {
	text   string
	quoted bool
}

// shellWords splits one line into words, keeping quoted words whole and splitting the operators
// that matter here (|, ;, &&, ||, >, >>) from their neighbours.
func shellWords(line string) []shellWord {
	var words []shellWord
	var cur strings.Builder
	quoted := false
	flush := func() {
		if cur.Len() > 0 || quoted {
			words = append(words, shellWord{cur.String(), quoted})
		}
		cur.Reset()
		quoted = false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				end = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+end])
			quoted = true
			i += end + 1
		case c == '\\' && i+1 < len(line):
			cur.WriteByte(line[i+1])
			i++
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && cur.Len() == 0:
			flush()
			return words
		case c == '|' || c == ';' || c == '&':
			// "2>&1" and "&>" stay inside the current word; others are operators.
			if c == '&' && cur.Len() > 0 && strings.HasSuffix(cur.String(), ">") {
				cur.WriteByte(c)
				continue
			}
			flush()
			op := string(c)
			if i+1 < len(line) && (line[i+1] == c) {
				op += string(c)
				i++
			}
			words = append(words, shellWord{text: op})
		case c == '>':
			// A redirection: keep an fd digit prefix ("2>") with it, split it from the word before.
			prefix := cur.String()
			if prefix != "" && prefix != "1" && prefix != "2" && prefix != "&" {
				flush()
				prefix = ""
			}
			cur.Reset()
			op := prefix + ">"
			if i+1 < len(line) && (line[i+1] == '>' || line[i+1] == '|') {
				op += string(line[i+1])
				i++
			}
			if strings.HasPrefix(op, "2") || strings.HasPrefix(op, "&") {
				// stderr or both-streams redirection: logs, not deliverables; skip its target.
				words = append(words, shellWord{text: op, quoted: true})
				continue
			}
			words = append(words, shellWord{text: op})
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return words
}

// shellCommand extracts the command line from Codex shell-like call arguments:
// shell {"command":["bash","-lc","…"]}, shell_command {"command":"…"}, exec_command {"cmd":"…"}.
func shellCommand(args json.RawMessage) (string, []string) {
	var a struct {
		Command json.RawMessage `json:"command"`
		Cmd     string          `json:"cmd"`
	}
	if json.Unmarshal(args, &a) != nil {
		return "", nil
	}
	if a.Cmd != "" {
		return a.Cmd, nil
	}
	var s string
	if json.Unmarshal(a.Command, &s) == nil {
		return s, nil
	}
	var argv []string
	if json.Unmarshal(a.Command, &argv) != nil || len(argv) == 0 {
		return "", nil
	}
	return agentlog.CommandLine(argv), argv
}

// codexOutput decodes a Codex tool output: a plain string, the older JSON
// {"output":…,"metadata":{"exit_code":…}}, or a list of content items. It returns the text and the
// exit code when one is recorded (metadata, "Exit code: N", "Process exited with code N").
func codexOutput(raw json.RawMessage) (text string, exit int, hasExit bool) {
	text = textOf(raw)
	if strings.HasPrefix(strings.TrimSpace(text), "{") {
		var o struct {
			Output   string `json:"output"`
			Metadata struct {
				ExitCode *int `json:"exit_code"`
			} `json:"metadata"`
		}
		if json.Unmarshal([]byte(text), &o) == nil && (o.Output != "" || o.Metadata.ExitCode != nil) {
			text = o.Output
			if o.Metadata.ExitCode != nil {
				return text, *o.Metadata.ExitCode, true
			}
		}
	}
	if n, ok := agentlog.ExitCode(text); ok {
		return text, n, true
	}
	return text, 0, false
}
