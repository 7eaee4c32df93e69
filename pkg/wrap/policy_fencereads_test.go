package wrap_test

import "testing"

// --fence-reads replaces the file's fence_reads, not a tool's own fence: false, which stays
// a pass as --pass does over --fence-reads (docs/policy.md, precedence). Real wrap, the test
// server's read-only balance: fenced by --fence-reads (its duplicate replayed) unless the file
// passes it by name.
func TestFenceReadsFlagAndAFilePass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy string
		fenced bool
	}{
		{"version: 1\nfence_reads: false\n", true},
		{"version: 1\ntools:\n  balance:\n    fence: false\n", false},
	} {
		r := newRig(t)
		w := r.wrap("--policy", writePolicy(t, r, c.policy), "--fence-reads")
		call(t, w.Session, "balance", `{}`)
		if x := call(t, w.Session, "balance", `{}`); x.replayed() != c.fenced {
			t.Errorf("%q with --fence-reads: the duplicate replayed %v, want %v", c.policy, x.replayed(), c.fenced)
		}
	}
}
