//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package h1

import (
	"net"
	"syscall"
)

// alive cannot peek here: an idle connection the upstream closed is found when a request on it
// fails, and retried where net/http's Transport would retry it.
func alive(syscall.RawConn) bool { return true }

func rawConn(net.Conn) syscall.RawConn { return nil }
