package h1

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peek is recv(fd, b, MSG_PEEK|MSG_DONTWAIT): nil when there are bytes or an end of stream to
// read, the errno otherwise. unix.Recvfrom would allocate the peer address it returns.
func peek(fd int, b []byte) error {
	_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
