//go:build !linux

package sqlite

// indexWatch tells when a ledger's shared-memory index was removed while this process maps
// it: on Linux only (index_linux.go), where /proc shows a process's descriptors.
type indexWatch struct{ fd int }

func (w *indexWatch) removed(string) bool { return false }
