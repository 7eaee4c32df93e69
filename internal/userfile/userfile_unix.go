//go:build unix

package userfile

import (
	"os"
	"syscall"
)

// open opens path non-blocking, which returns at once for a named pipe without a writer,
// then makes reads blocking again, so that a pipe with a writer is read to its end as usual
// (a read with no writer left returns end of file either way).
func open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return f, nil
}
