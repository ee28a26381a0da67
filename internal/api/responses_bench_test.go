package api_test

import (
	"testing"

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
