package proxy

import (
	"bytes"
	"context"
	"io"
	"net"

	"github.com/compactd/compactd/internal/h1"
)

// Upstream writes of compactd's own request bodies. net/http writes a request body by copying it
// through a 32 KiB buffer into the connection (the transport wraps every body in an
// io.LimitedReader, which hides a bytes.Reader's WriteTo): a 2 MB turn is 64 write system calls,
// each a trip through the kernel's TCP path. A body compactd read whole (the client's bytes, or a
// splice of them) is already in memory, so bulkConn writes it in one Write per piece; measured on
// loopback, 2 MB bodies cost the sending process 0.79 ms of CPU per request this way and 1.22 ms
// through the copy buffer (BENCHMARKS.md, issue 27).
//
// Only plain-TCP upstreams take this path: over TLS the transport writes through a tls.Conn,
// which cuts records of its own, and never asks the connection to ReadFrom.

// bulkBody is a request body that can write what is left of it, up to n bytes, straight to w:
// the contract compactd's own upstream client (internal/h1) writes such bodies by, too.
type bulkBody = h1.BodyWriter

// bulkDial wraps dial so that its connections write bulkBody request bodies whole.
func bulkDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return bulkConn{c}, nil
	}
}

// bulkConn is an upstream connection whose ReadFrom (what the transport's body copy ends in)
// writes a bulkBody without a copy buffer, and leaves every other reader to the connection's own
// ReadFrom (a TCP connection's splice and sendfile included).
type bulkConn struct{ net.Conn }

// NetConn is the connection bulkConn wraps (internal/h1 peeks at an idle one through it).
func (c bulkConn) NetConn() net.Conn { return c.Conn }

func (c bulkConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if b, ok := lr.R.(bulkBody); ok {
			n, err := b.WriteBodyTo(c.Conn, lr.N)
			lr.N -= n
			return n, err
		}
		if b, ok := lr.R.(*bytes.Reader); ok && int64(b.Len()) <= lr.N {
			// A small body's rest, past what fitted beside the head in the transport's buffer
			// (instrumentedTransport.RoundTrip): one write.
			n, err := b.WriteTo(c.Conn)
			lr.N -= n
			return n, err
		}
	}
	if b, ok := r.(bulkBody); ok {
		return b.WriteBodyTo(c.Conn, 1<<62)
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// WriteBodyTo writes at most n bytes of what is left of the body to w, in one Write.
func (b *replayBody) WriteBodyTo(w io.Writer, n int64) (int64, error) {
	rest := b.body[len(b.body)-b.Reader.Len():]
	if int64(len(rest)) > n {
		rest = rest[:n]
	}
	m, err := w.Write(rest)
	_, _ = b.Reader.Seek(int64(m), io.SeekCurrent)
	if b.Reader.Len() == 0 {
		b.drained.Store(true)
	}
	return int64(m), err
}

// WriteBodyTo writes at most n bytes of what is left of the pieces to w, one Write per piece.
func (b *spliceBody) WriteBodyTo(w io.Writer, n int64) (int64, error) {
	var total int64
	for b.i < len(b.parts) && total < n {
		p := b.parts[b.i][b.at:]
		if int64(len(p)) > n-total {
			p = p[:n-total]
		}
		m, err := w.Write(p)
		total += int64(m)
		b.at += m
		if b.at == len(b.parts[b.i]) {
			b.i, b.at = b.i+1, 0
		}
		if err != nil {
			return total, err
		}
	}
	// Empty pieces after the last byte written are done too: a write of exactly what is left
	// (the transport's Content-Length) drains the body.
	for b.i < len(b.parts) && b.at == len(b.parts[b.i]) {
		b.i, b.at = b.i+1, 0
	}
	if b.i >= len(b.parts) {
		b.drained.Store(true)
	}
	return total, nil
}
