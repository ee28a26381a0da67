//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package h1

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peeker looks at an idle connection without reading from it. Made once a connection, so a look
// allocates nothing.
type peeker struct {
	raw syscall.RawConn
	fn  func(fd uintptr) bool
	ok  bool
	b   [1]byte
}

// newPeeker is the peeker of nc's descriptor, reached through wrappers that expose the
// connection they wrap (NetConn, as crypto/tls has it), or nil when there is none.
func newPeeker(nc net.Conn) *peeker {
	for i := 0; i < 4 && nc != nil; i++ {
		if sc, ok := nc.(syscall.Conn); ok {
			raw, err := sc.SyscallConn()
			if err != nil {
				return nil
			}
			p := &peeker{raw: raw}
			p.fn = p.look
			return p
		}
		w, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = w.NetConn()
	}
	return nil
}

// alive reports whether an idle connection is still open, with one non-blocking peek: an
// upstream that closed it (its keep-alive timeout ran out) has left an end of stream to read, and
// one that wrote something unasked (a 408 before closing, say) has left bytes no request of ours
// answers. Either way the connection is not reused. Without a descriptor (p == nil) it cannot
// tell, and says yes.
func (p *peeker) alive() bool {
	if p == nil {
		return true
	}
	p.ok = false
	err := p.raw.Read(p.fn)
	return p.ok && err == nil
}

func (p *peeker) look(fd uintptr) bool {
	err := peek(int(fd), p.b[:])
	p.ok = err == unix.EAGAIN || err == unix.EWOULDBLOCK || err == unix.EINTR
	return true // never wait: the answer is now
}
