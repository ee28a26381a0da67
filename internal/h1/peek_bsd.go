//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package h1

import "golang.org/x/sys/unix"

// peek is recv(fd, b, MSG_PEEK|MSG_DONTWAIT): nil when there are bytes or an end of stream to
// read, the errno otherwise.
func peek(fd int, b []byte) error {
	_, _, err := unix.Recvfrom(fd, b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return err
}
