package jsonx_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/jsonx"
)

// BenchmarkValid compares the one-pass validator every request body goes through with what it
// replaced (CheckDepth, then gjson.ValidBytes) and with gjson.ValidBytes alone, on a 2 MB body
// shaped like a coding agent's turn (mostly long strings: code, logs, ciphertext).
func BenchmarkValid(b *testing.B) {
	body := workload.Request(2<<20, workload.BodyOptions{Stream: true})
	if jsonx.Valid(body) != nil || !gjson.ValidBytes(body) {
		b.Fatal("workload body is not valid JSON")
	}
	run := func(name string, valid func([]byte) bool) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			c0 := cputime.Process()
			for b.Loop() {
				if !valid(body) {
					b.Fatal("invalid")
				}
			}
			cputime.Report(b, c0)
		})
	}
	run("jsonx.Valid", func(d []byte) bool { return jsonx.Valid(d) == nil })
	run("gjson.ValidBytes", gjson.ValidBytes)
	run("CheckDepth+gjson.ValidBytes", func(d []byte) bool {
		return jsonx.CheckDepth(d, jsonx.MaxDepth) == nil && gjson.ValidBytes(d)
	})
}

// BenchmarkValidEscapes is the string scan alone on what dominates agent bodies: one long string
// of code and logs with a JSON escape every ~26 bytes (\n, \t, \"), the workload's density; code
// twice as dense; and, for comparison, the same length without escapes and in non-ASCII text.
func BenchmarkValidEscapes(b *testing.B) {
	cases := []struct{ name, unit string }{
		{"every26", `2026-12-01 ok: served /v1\nrequest took 12ms total\tstatus=\"ok\" and more`},
		{"code", `\tif err := run(ctx, \"go test ./...\"); err != nil {\n\t\treturn fmt.Errorf(\"run: %w\", err)\n\t}\n`},
		{"plain", strings.Repeat("plain ascii text without escapes ", 3)},
		{"utf8", "Grüße, 世界: ¿qué tal? — ok\\n"},
	}
	for _, c := range cases {
		doc := []byte(`"` + strings.Repeat(c.unit, (1<<20)/len(c.unit)) + `"`)
		if err := jsonx.Valid(doc); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			c0 := cputime.Process()
			for b.Loop() {
				if jsonx.Valid(doc) != nil {
					b.Fatal("invalid")
				}
			}
			cputime.Report(b, c0)
		})
	}
}
