package sqlite

import "os"

// RestingReader and StillAtRest are Check's look at a ledger at rest (rest_linux.go), for the
// tests that open the ledger in another process between the two.
func RestingReader(path string) *os.File { return restingReader(path) }

func StillAtRest(f *os.File, path string) bool { return stillAtRest(f, path) }

// UnwritableBeside is the look an error of an open Store takes at the files beside its ledger.
func UnwritableBeside(path string) string { return unwritableBeside(path) }

// SQLiteNameOf is the name under which process pid uses the ledger file real, as
// checkOtherName sees it ("": none other than real).
func SQLiteNameOf(pid int, real string) string { return sqliteNameOf(pid, real) }
