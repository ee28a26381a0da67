//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package h1

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// alive reports whether an idle connection is still open, with one non-blocking peek: an
// upstream that closed it (its keep-alive timeout ran out) has left an end of stream to read, and
// one that wrote something unasked (a 408 before closing, say) has left bytes no request of ours
// answers. Either way the connection is not reused. Without a descriptor (raw == nil) it cannot
// tell, and says yes.
func alive(raw syscall.RawConn) bool {
	if raw == nil {
		return true
	}
	ok := true
	var b [1]byte
	err := raw.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		ok = err == unix.EAGAIN || err == unix.EWOULDBLOCK || err == unix.EINTR
		return true // never wait: the answer is now
	})
	return ok && err == nil
}

// rawConn is nc's descriptor for alive, through wrappers that expose the connection they wrap
// (NetConn, as crypto/tls has it), or nil.
func rawConn(nc net.Conn) syscall.RawConn {
	for i := 0; i < 4 && nc != nil; i++ {
		if sc, ok := nc.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				return raw
			}
			return nil
		}
		w, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = w.NetConn()
	}
	return nil
}
