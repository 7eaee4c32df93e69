//go:build !unix

package fence

// processGone cannot tell on this platform; claims of dead processes wait for their lease.
func processGone(int) bool { return false }

// lockDir has no advisory lock on this platform: drains of one spool by two processes may
// report an outcome twice (a commit is idempotent; a second release is refused and audited).
func lockDir(string) (func(), error) { return func() {}, nil }

// groupProbe cannot tell on this platform (no carrier is named here: GroupCarrier reads /proc).
func groupProbe(int) (empty, foreign bool) { return false, true }
