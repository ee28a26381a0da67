package proxy

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/compactd/compactd/internal/api"
)

// TestSpliceBodyWriteAtMost: a splice (empty pieces among them) written in at most n bytes, to a
// TCP connection and to a plain writer, then read to its end, gives exactly its bytes, and is
// drained only once everything has been written: what the transport's Content-Length-limited
// copy of a handoff body relies on.
func TestSpliceBodyWriteAtMost(t *testing.T) {
	parts := func() api.Splice {
		return api.Splice{[]byte(`{"input":[`), nil, []byte(`{"type":"message","role":"developer","content":"handoff"}`), {}, []byte(`,{"role":"user","content":"next"}]}`), nil}
	}
	want := bytes.Join(parts(), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, limit := range []int64{1, 5, 10, 11, 40, 67, 68, 69, int64(len(want)) - 1, int64(len(want)), 1 << 62} {
		for _, tcp := range []bool{false, true} {
			b := &spliceBody{parts: parts()}
			var got bytes.Buffer
			var w io.Writer = &got
			var done chan []byte
			if tcp {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				s, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				done = make(chan []byte)
				go func() { all, _ := io.ReadAll(s); s.Close(); done <- all }()
				w = c
				defer c.Close()
			}
			n, err := b.WriteBodyTo(w, limit)
			if err != nil {
				t.Fatal(err)
			}
			if n != min(limit, int64(len(want))) {
				t.Errorf("limit %d tcp %v: wrote %d, want %d", limit, tcp, n, min(limit, int64(len(want))))
			}
			if b.drained.Load() != (n == int64(len(want))) {
				t.Errorf("limit %d tcp %v: drained %v after %d of %d bytes", limit, tcp, b.drained.Load(), n, len(want))
			}
			rest, err := io.ReadAll(b)
			if err != nil {
				t.Fatal(err)
			}
			if !b.drained.Load() {
				t.Errorf("limit %d tcp %v: not drained after the rest was read", limit, tcp)
			}
			var head []byte
			if tcp {
				w.(net.Conn).Close()
				head = <-done
			} else {
				head = got.Bytes()
			}
			if all := append(head, rest...); !bytes.Equal(all, want) {
				t.Errorf("limit %d tcp %v: body %q, want %q", limit, tcp, all, want)
			}
		}
	}
}
