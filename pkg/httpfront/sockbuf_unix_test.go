//go:build unix

package httpfront_test

import "syscall"

// setBuffers makes a socket's send and receive buffers small (64 KiB asked; the kernel
// doubles it), so what a writer may have in flight is small too.
func setBuffers(c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64<<10); serr == nil {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		}
	})
	if err != nil {
		return err
	}
	return serr
}
