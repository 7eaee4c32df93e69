//go:build !linux

package sqlite

// Volatile is a Linux check (see fskind_linux.go): elsewhere every filesystem is taken to keep
// the ledger.
func Volatile(string) string { return "" }

// diskTrouble is a Linux look (see fskind_linux.go): elsewhere it names nothing.
func diskTrouble(string, bool) string { return "" }
