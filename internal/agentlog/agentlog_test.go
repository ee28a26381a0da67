package agentlog

import (
	"reflect"
	"strings"
	"testing"
)

func TestPatchFiles(t *testing.T) {
	for _, tc := range []struct {
		name, patch string
		want        []string
	}{
		{"every file line, in order", "*** Begin Patch\n*** Add File: a/new.go\n+package a\n*** Update File: b/old.go\n*** Move to: b/renamed.go\n@@\n-x\n+y\n*** Delete File: c/gone.go\n*** End Patch\n",
			[]string{"a/new.go", "b/old.go", "b/renamed.go", "c/gone.go"}},
		{"CRLF and padding", "*** Begin Patch\r\n*** Update File:  x.go \r\n*** End Patch\r\n", []string{"x.go"}},
		{"an added line that looks like one is content", "*** Begin Patch\n*** Add File: a.md\n+*** Update File: not/this.go\n*** End Patch", []string{"a.md"}},
		{"empty name dropped", "*** Update File: \n", nil},
		{"no envelope", "just text", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PatchFiles(tc.patch); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PatchFiles = %q, want %q", got, tc.want)
			}
		})
	}
	if !IsPatch("cat <<'EOF' | apply_patch\n*** Begin Patch\n") || IsPatch("*** End Patch") {
		t.Error("IsPatch")
	}
	if !IsPatchTool("apply_patch") || !IsPatchTool("applypatch") || IsPatchTool("patch") {
		t.Error("IsPatchTool")
	}
}

func TestShellTools(t *testing.T) {
	for name, want := range map[string]bool{
		"shell": true, "shell_command": true, "exec_command": true, "container.exec": true, "local_shell": true,
		"bash": true, "run_command": true, "run_terminal_cmd": true, "execute_command": true,
		"apply_patch": false, "Read": false, "": false,
	} {
		if got := IsShellTool(name); got != want {
			t.Errorf("IsShellTool(%q) = %v", name, got)
		}
	}
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"bash", "-lc", "go test ./... | tail"}, "go test ./... | tail"},
		{[]string{"/bin/zsh", "-c", "make"}, "make"},
		{[]string{"/usr/local/bin/bash", "-lc", "ls"}, "ls"},
		{[]string{"fish", "-c", "make"}, "make"},
		{[]string{"ssh", "-c", "aes128-ctr"}, "ssh -c aes128-ctr"}, // ends in "sh", is no shell
		{[]string{"bash", "-lc"}, "bash -lc"},
		{[]string{"rg", "-n", "retry budget", "internal"}, "rg -n 'retry budget' internal"},
		{[]string{"echo", "it's", "", "a*b", "~/x", "!"}, `echo 'it'\''s' '' 'a*b' '~/x' '!'`},
	} {
		if got := CommandLine(tc.argv); got != tc.want {
			t.Errorf("CommandLine(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	long := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name string
		out  string
		want int
		ok   bool
	}{
		{"codex shell header", "Exit code: 1\nWall time: 0.2 seconds\nOutput:\nFAIL", 1, true},
		{"codex exec_command", "Chunk ID: 7f3a\nWall time: 0.4 seconds\nProcess exited with code 2\nOutput:\nx", 2, true},
		{"claude bash", "Exit code 127\nbash: foo: command not found", 127, true},
		{"go and make", "FAIL\tpkg\t0.1s\nexit status 1", 1, true},
		{"negative", "Exit code: -1", -1, true},
		{"CRLF", "Exit code: 3\r\nOutput:", 3, true},
		{"prose is no status line", "the exit code: 3 means the linter found issues", 0, false},
		{"nothing", "ok\tpkg\t0.1s", 0, false},
		{"tail of a long output", long + "\n" + long + "\nexit status 4\n", 4, true},
		{"middle of a long output is not searched", long + "\nexit status 4\n" + long, 0, false},
		{"a line cut by the head bound is not misread", strings.Repeat("y", 1024-len("\nExit code: 1")) + "\nExit code: 12\n" + long, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ExitCode(tc.out)
			if got != tc.want || ok != tc.ok {
				t.Errorf("ExitCode = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
