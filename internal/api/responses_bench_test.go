package api_test

import (
	"testing"

	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/api"
)

// benchSizes are the request bodies of issue 9: a short session, a long one, and one near the
// largest histories agents send.
var benchSizes = []struct {
	name string
	size int
}{{"10KB", 10 << 10}, {"1MB", 1 << 20}, {"4MB", 4 << 20}}

// BenchmarkParseResponsesRequest is the skim every /v1/responses turn pays: validate the JSON,
// read the top-level fields, and slice out every input item with its type and role.
func BenchmarkParseResponsesRequest(b *testing.B) {
	for _, bs := range benchSizes {
		body := workload.Request(bs.size, workload.BodyOptions{Stream: true, CompactThreshold: 1 << 30})
		b.Run(bs.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			c0 := cputime.Process()
			for b.Loop() {
				r, err := api.ParseResponsesRequest(body)
				if err != nil || len(r.Items) < 2 {
					b.Fatalf("parse: %v", err)
				}
			}
			cputime.Report(b, c0)
		})
	}
}

// BenchmarkWithInput is the splice of a below-threshold turn that carried context_management: the
// same items written back with the member dropped (one allocation of the body's size).
func BenchmarkWithInput(b *testing.B) {
	for _, bs := range benchSizes {
		body := workload.Request(bs.size, workload.BodyOptions{Stream: true, CompactThreshold: 1 << 30})
		r, err := api.ParseResponsesRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		raw := make([][]byte, len(r.Items))
		for i, it := range r.Items {
			raw[i] = it.Raw
		}
		b.Run(bs.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			c0 := cputime.Process()
			for b.Loop() {
				if out := r.WithInput(raw, true); len(out) >= len(body) {
					b.Fatal("context_management not dropped")
				}
			}
			cputime.Report(b, c0)
		})
	}
}

// BenchmarkRecallRebuild is the body of a recall turn: the items written back and the recall
// tool appended, in one copy (Rebuild) against the two it took before (WithInput, then sjson
// appending to tools, which re-parses the new body).
func BenchmarkRecallRebuild(b *testing.B) {
	tool := []byte(`{"type":"function","name":"compactd_recall","description":"Look up earlier turns.","strict":true,"parameters":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"],"additionalProperties":false}}`)
	for _, bs := range benchSizes {
		body := workload.Request(bs.size, workload.BodyOptions{Stream: true, CompactThreshold: 1 << 30})
		r, err := api.ParseResponsesRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		raw := make([][]byte, len(r.Items))
		for i, it := range r.Items {
			raw[i] = it.Raw
		}
		for _, mode := range []string{"Rebuild", "WithInput+sjson"} {
			b.Run(bs.name+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				c0 := cputime.Process()
				for b.Loop() {
					var out []byte
					if mode == "Rebuild" {
						out = r.Rebuild(raw, true, tool)
					} else {
						out, _ = sjson.SetRawBytes(r.WithInput(raw, true), "tools.-1", tool)
					}
					if len(out) < len(tool) {
						b.Fatal("no body")
					}
				}
				cputime.Report(b, c0)
			})
		}
	}
}
