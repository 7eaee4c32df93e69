// Package userfile opens a file that a user names for the program to read at start (a policy
// file, a file of API keys) without hanging on a named pipe that nothing writes to.
//
// Opening a named pipe for reading waits for a writer, for ever if none comes: a mistyped
// path that names a FIFO would leave wrap (started by an MCP client, which shows nothing) or
// `effectfence policy check` hanging with no word said. Open does not wait. A pipe that has
// a writer (a shell's <(…), a producer already running) reads as usual, to its end; one that
// has none reads as empty at once, so the caller's own "empty" error names the path.
package userfile

import "os"

// Open opens path for reading, as os.Open does, except that it never waits for a named
// pipe's writer (see the package comment).
func Open(path string) (*os.File, error) { return open(path) }
