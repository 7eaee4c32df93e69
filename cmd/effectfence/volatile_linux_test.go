package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestVolatileLedgerIsWarned: a ledger whose filesystem does not outlive what holds it is
// named on stderr when serve or wrap opens it: an overlay filesystem (a container's own
// writable layer, removed with the container) and tmpfs (emptied at reboot). The real binary
// runs in a mount namespace of its own where those filesystems are really mounted; the same
// command on this test's own disk says nothing of the kind. Stdout stays protocol.
func TestVolatileLedgerIsWarned(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount filesystems in a namespace of its own (unshare)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("skipped: the unshare command is not installed")
	}
	bin := effectfence(t)
	dir := t.TempDir()
	for _, d := range []string{"tmp", "lower", "upper", "work", "layer"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mounts := `mount -t tmpfs tmpfs "$D/tmp" && mount -t overlay overlay -o "lowerdir=$D/lower,upperdir=$D/upper,workdir=$D/work" "$D/layer" && exec "$@"`
	for _, c := range []struct{ name, ledger, want string }{
		{"tmpfs", filepath.Join(dir, "tmp", "ledger.db"), "is in memory (tmpfs)"},
		{"overlay", filepath.Join(dir, "layer", "ledger.db"), "is on an overlay filesystem"},
		{"disk", filepath.Join(dir, "ledger.db"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var st syscall.Statfs_t
			if c.want == "" && (syscall.Statfs(dir, &st) != nil || st.Type == 0x01021994 || st.Type == 0x794c7630) {
				t.Skip("skipped: this test's own temporary directory is on tmpfs or overlay")
			}
			// serve, and wrap (whose server starts only at the agent's initialize), both end
			// at the end of their input.
			for _, argv := range [][]string{{"serve", "--ledger", c.ledger}, {"wrap", "--ledger", c.ledger, "--", "true"}} {
				cmd := exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", mounts, "sh", bin}, argv...)...)
				cmd.Env = append(os.Environ(), "D="+dir, "NO_COLOR=1")
				cmd.Stdin = strings.NewReader("")
				var out, errb strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &errb
				if err := cmd.Run(); err != nil {
					t.Fatalf("%s: %v\n%s", argv, err, errb.String())
				}
				warned := strings.Contains(errb.String(), "effectfence: warning: ledger "+c.ledger+" ")
				switch {
				case c.want == "" && warned:
					t.Fatalf("%s: a ledger on this disk was warned about:\n%s", argv[0], errb.String())
				case c.want != "" && (!warned || !strings.Contains(errb.String(), c.want) || !strings.Contains(errb.String(), "runs again")):
					t.Fatalf("%s on a %s ledger said nothing of it; want %q on stderr:\n%s", argv[0], c.name, c.want, errb.String())
				}
				if out.Len() != 0 {
					t.Fatalf("%s: stdout carried %q", argv[0], out.String())
				}
			}
		})
	}
}
