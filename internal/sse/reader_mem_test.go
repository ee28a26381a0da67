package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// randomReader returns its bytes in reads of random length (1 to max bytes).
type randomReader struct {
	b   []byte
	r   *rand.Rand
	max int
}

func (r *randomReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.b), 1+r.r.IntN(r.max))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// randomStream is a stream of SSE pieces in random order: fields, comments, every line ending,
// byte-order marks, long values, so that events, blank lines and line endings fall on every
// boundary of the reads and of the Reader's buffer and chunks.
func randomStream(r *rand.Rand) []byte {
	pieces := []string{"data: ", "data:", "data", "event: a", "event: b", "id: 7", ": c", "retry: 1", "x", "{\"a\":1}",
		"\n", "\n", "\r", "\r\n", "\r\n", "\n\n", "\r\r", "\xef\xbb\xbf", "\xef\xbb", " "}
	var b []byte
	if r.IntN(4) == 0 {
		b = append(b, "\xef\xbb\xbf"[:1+r.IntN(3)]...)
	}
	for n := r.IntN(60); n > 0; n-- {
		if r.IntN(8) == 0 {
			b = append(b, strings.Repeat("v", r.IntN(300))...)
			continue
		}
		b = append(b, pieces[r.IntN(len(pieces))]...)
	}
	return b
}

type readResult struct {
	raw, name, data, id string
	hasData, terminated bool
	err                 error
}

func readWith(next func() (Event, error)) []readResult {
	var out []readResult
	for range 10000 {
		ev, err := next()
		out = append(out, readResult{string(ev.Raw), ev.Name, string(ev.Data), ev.ID, ev.HasData(), ev.Terminated, err})
		if err != nil {
			break
		}
	}
	return out
}

// The Reader reads every stream as the reference (the Reader before events were held in place)
// does, event by event — Raw, fields, termination and errors — however the stream is cut into
// reads, with the buffer and chunk sizes lowered so that events cross them.
func TestReaderAgreesWithReference(t *testing.T) {
	defer func(rb, be int) { readBuffer, bigEvent = rb, be }(readBuffer, bigEvent)
	readBuffer, bigEvent = 8, 32
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		in := randomStream(rnd)
		if i < len(readerCases) {
			in = []byte(readerCases[i].in)
		}
		maxEv := []int{DefaultMaxEvent, 40, 100, 1000}[i%4]
		step := 1 + rnd.IntN(80)
		seed := rnd.Uint64()
		want := readWith(newRefReader(&randomReader{in, rand.New(rand.NewPCG(seed, 0)), step}, maxEv).Next)
		got := readWith(NewReaderSize(&randomReader{in, rand.New(rand.NewPCG(seed, 0)), step}, maxEv).Next)
		if len(got) != len(want) {
			t.Fatalf("stream %q (cap %d, reads ≤ %d): %d results, want %d\ngot  %+v\nwant %+v", in, maxEv, step, len(got), len(want), got, want)
		}
		for j := range got {
			g, w := got[j], want[j]
			if g.raw != w.raw || g.name != w.name || g.data != w.data || g.id != w.id || g.hasData != w.hasData ||
				g.terminated != w.terminated || !errors.Is(g.err, w.err) {
				t.Fatalf("stream %q (cap %d, reads ≤ %d): result %d = %+v, want %+v", in, maxEv, step, j, g, w)
			}
		}
	}
}

// Reading one event costs about its size, once: the Reader holds it where it was read (Raw and
// Data slices of it, not copies) and, past bigEvent, in chunks joined once into a Raw of its
// exact size. Live after a collection, while the event is held: at most 1.1× its size and the
// read buffer (the reference held three copies: its buffer rounded up to a power of two, Raw and
// Data). Allocated in all: at most 2.1× and the buffer's doublings (the chunks, then the joined
// Raw; the reference allocated every doubling of its buffer besides its copies, about 5×).
func TestReaderHoldsAnEventOnce(t *testing.T) {
	for _, size := range []int{9<<20 + 7, 17 << 20, 33<<20 + 1000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			value := bytes.Repeat([]byte("x"), size)
			stream := append(append([]byte("event: response.output_text.delta\ndata: {\"delta\":\""), value...), "\"}\n\ndata: {}\n\n"...)
			value = nil
			live, total := measureEvent(t, stream, func(src io.Reader) func() (Event, error) { return NewReader(src).Next })
			t.Logf("event of %d bytes: %.2f× live while held, %.2f× allocated", size, float64(live)/float64(size), float64(total)/float64(size))
			if live > size+size/10+bigEvent {
				t.Errorf("holding an event of %d bytes kept %d bytes live (%.2f×), want at most 1.1× and the read buffer", size, live, float64(live)/float64(size))
			}
			if total > 2*size+size/10+3*bigEvent {
				t.Errorf("reading an event of %d bytes allocated %d bytes (%.2f×), want at most 2.1× and the buffer's doublings", size, total, float64(total)/float64(size))
			}
		})
	}
}

// measureEvent reads the first event of stream (from a reader that hands out 64 KiB at a time, as
// a network connection would) and returns the bytes live after a collection while the event is
// held, and the bytes allocated reading it.
func measureEvent(t *testing.T, stream []byte, reader func(io.Reader) func() (Event, error)) (live, total int) {
	t.Helper()
	src := &randomReader{stream, rand.New(rand.NewPCG(3, 4)), 64 << 10}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	next := reader(src)
	ev, err := next()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if err != nil || !ev.Terminated || len(ev.Raw) < len(stream)-16 {
		t.Fatalf("event: %d bytes, %v", len(ev.Raw), err)
	}
	runtime.KeepAlive(ev)
	runtime.KeepAlive(next)
	return int(after.HeapAlloc) - int(before.HeapAlloc), int(after.TotalAlloc - before.TotalAlloc)
}
