package proxy

import (
	"net/http"
	"syscall"
)

// Waking less while a large body arrives. compactd reads a body whole before it decides, and a
// reader that keeps up with a fast client finds the socket empty after most reads: on loopback a
// 2 MB body took about ten waits in the poller, each a trip through the scheduler (compactd made
// 43-46 context switches a request where the bare proxy, busy writing between its reads, made
// 36-37). With SO_RCVLOWAT the kernel reports the connection readable only once that many bytes
// are queued, so the reader sleeps until a large piece is there. The mark is always below what
// is still to come (it drops to 1 for the body's last 128 KiB), so a read can never wait for
// bytes the client will not send, and it is 1 again once the body is read: the server's
// background read, and the next request on the connection, wait for one byte as before.

const (
	// lowatMin: below this much still to come, the mark is 1.
	lowatMin = 128 << 10
	// lowatMax is the highest mark: reads of up to half a megabyte, still in cache when the
	// skim cache's MAC hashes them.
	lowatMax = 512 << 10
)

// lowat is the receive low-water mark of one request's connection.
type lowat struct {
	conn syscall.RawConn
	cur  int
}

// bodyLowat is the mark to read r's body under: nil for a body too small to be worth it (it
// arrives in a few reads anyway) or past the limit (refused before it is read).
func bodyLowat(r *http.Request, limit int64) *lowat {
	if r.ContentLength > 2*lowatMin && r.ContentLength <= limit {
		return newLowat(r)
	}
	return nil
}

// newLowat returns the mark of r's connection, nil when it cannot be set (no ConnContext, TLS,
// HTTP/2, or not Linux).
func newLowat(r *http.Request) *lowat {
	if r.ProtoMajor != 1 || !lowatSupported {
		return nil
	}
	cs := connStateOf(r.Context())
	if cs == nil || cs.tcp == nil {
		return nil
	}
	rc, err := cs.tcp.SyscallConn()
	if err != nil {
		return nil
	}
	return &lowat{conn: rc, cur: 1}
}

// before sets the mark for a read with left bytes of the body still to come.
func (l *lowat) before(left int) {
	if l == nil {
		return
	}
	n := 1
	if left > lowatMin {
		n = min(left-lowatMin/2, lowatMax)
	}
	if n != l.cur && (n < l.cur || l.cur == 1) {
		l.set(n)
	}
}

// done puts the mark back to 1.
func (l *lowat) done() {
	if l != nil && l.cur != 1 {
		l.set(1)
	}
}

func (l *lowat) set(n int) {
	var serr error
	if err := l.conn.Control(func(fd uintptr) { serr = setRcvLowat(fd, n) }); err != nil || serr != nil {
		l.cur = 1 // unknown: try again next time
		return
	}
	l.cur = n
}
