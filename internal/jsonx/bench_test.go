package jsonx_test

import (
	"testing"

	"github.com/tidwall/gjson"

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
			for b.Loop() {
				if !valid(body) {
					b.Fatal("invalid")
				}
			}
		})
	}
	run("jsonx.Valid", func(d []byte) bool { return jsonx.Valid(d) == nil })
	run("gjson.ValidBytes", gjson.ValidBytes)
	run("CheckDepth+gjson.ValidBytes", func(d []byte) bool {
		return jsonx.CheckDepth(d, jsonx.MaxDepth) == nil && gjson.ValidBytes(d)
	})
}
