//go:build !unix

package userfile

import "os"

// open is os.Open: outside Unix no file-system path names a pipe that opening waits on.
func open(path string) (*os.File, error) { return os.Open(path) }
