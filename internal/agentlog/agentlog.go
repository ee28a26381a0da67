// Package agentlog holds the heuristics for reading coding agents' tool calls that more than one
// part of compactd needs: the facts ledger (compact) reads them from a request's items, the
// session handoff (handoff) from Codex and Claude Code session logs. One copy, so the two never
// disagree on what a patch, a shell command or an exit status looks like.
//
// Everything here is linear in its input and allocation-light; none of it parses JSON.
package agentlog

import (
	"path"
	"regexp"
	"strconv"
	"strings"
)

// PatchBegin opens Codex's apply_patch envelope ("*** Begin Patch" … "*** End Patch").
const PatchBegin = "*** Begin Patch"

// patchFilePrefixes start the envelope's lines that name a file.
var patchFilePrefixes = []string{"*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "}

// IsPatch reports whether s carries an apply_patch envelope.
func IsPatch(s string) bool { return strings.Contains(s, PatchBegin) }

// IsPatchTool reports whether name (a tool, or argv[0] of a command) applies patches.
func IsPatchTool(name string) bool { return name == "apply_patch" || name == "applypatch" }

// PatchFileLine returns the file a patch line names ("*** Update File: path" and its Add, Delete
// and Move to siblings), trimmed, and whether the line is one of those.
func PatchFileLine(line string) (file string, ok bool) {
	line = strings.TrimRight(line, "\r")
	for _, pre := range patchFilePrefixes {
		if p, found := strings.CutPrefix(line, pre); found {
			return strings.TrimSpace(p), true
		}
	}
	return "", false
}

// PatchFiles lists the files an apply_patch body touches, in order.
func PatchFiles(patch string) []string {
	var files []string
	for line := range strings.SplitSeq(patch, "\n") {
		if f, ok := PatchFileLine(line); ok && f != "" {
			files = append(files, f)
		}
	}
	return files
}

// shellTools are the tool names agents run commands with: Codex's shell, shell_command,
// exec_command, container.exec and local_shell; other agents' bash, run_command,
// run_terminal_cmd and execute_command.
var shellTools = map[string]bool{
	"shell": true, "shell_command": true, "exec_command": true, "container.exec": true, "local_shell": true,
	"bash": true, "run_command": true, "run_terminal_cmd": true, "execute_command": true,
}

// IsShellTool reports whether a tool of this name runs shell commands.
func IsShellTool(name string) bool { return shellTools[name] }

// shells are the interpreters whose "-c"/"-lc" wrapping CommandLine unwraps, by base name.
var shells = map[string]bool{
	"sh": true, "bash": true, "zsh": true, "dash": true, "ash": true, "ksh": true, "mksh": true,
	"csh": true, "tcsh": true, "fish": true, "pwsh": true,
}

// ShellScript returns the script of an argv that only wraps one in a shell (["bash", "-lc",
// "go test ./..."], also /bin/sh -c and the like), and whether argv is such a wrapper.
func ShellScript(argv []string) (string, bool) {
	if len(argv) == 3 && (argv[1] == "-lc" || argv[1] == "-c") && shells[path.Base(argv[0])] {
		return argv[2], true
	}
	return "", false
}

// CommandLine renders an argv as the command line a person would type: a shell wrapper is its
// script, other arguments are quoted only where the shell would split or expand them.
func CommandLine(argv []string) string {
	if s, ok := ShellScript(argv); ok {
		return s
	}
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

// Quote quotes a shell argument only when the shell would split or expand it, so commands read
// as they were typed.
func Quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?;&|<>()[]{}!#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// exitLineRe matches a line that reports a command's exit status, as harnesses write it: Codex
// shell ("Exit code: N"), Codex exec_command ("Process exited with code N"), Claude Code ("Exit
// code N", first line of a failed Bash result), Go and make ("exit status N"). A whole line, so
// prose that mentions an exit code is not one.
var exitLineRe = regexp.MustCompile(`(?im)^[ \t]*(?:exit code:?|process exited with code|exit status)[ \t]+(-?\d+)[ \t]*\r?$`)

// exitHead and exitTail bound the search in long outputs: harnesses put the status in a header
// or at the very end.
const exitHead, exitTail = 1024, 512

// ExitCode finds a command's exit status in its text output (not in JSON metadata: callers read
// metadata.exit_code with their own JSON decoding). Only the first exitHead and last exitTail
// bytes of a long output are searched.
func ExitCode(out string) (code int, ok bool) {
	if !containsExit(out) {
		return 0, false
	}
	find := func(s string) (int, bool) {
		if m := exitLineRe.FindStringSubmatch(s); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil {
				return n, true
			}
		}
		return 0, false
	}
	if len(out) <= exitHead+exitTail {
		return find(out)
	}
	// Cut at line ends, so a status line split by the bound is not read as a shorter number.
	head, tail := out[:exitHead], out[len(out)-exitTail:]
	if i := strings.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	if i := strings.IndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	if n, ok := find(head); ok {
		return n, true
	}
	return find(tail)
}

// containsExit is a cheap ASCII case-insensitive test for "exit", which every status line holds.
func containsExit(s string) bool {
	for i := 0; i+4 <= len(s); i++ {
		if (s[i]|0x20) == 'e' && (s[i+1]|0x20) == 'x' && (s[i+2]|0x20) == 'i' && (s[i+3]|0x20) == 't' {
			return true
		}
	}
	return false
}
