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
			cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", "sh", "-c", mounts, "sh", bin, "serve", "--ledger", c.ledger)
			cmd.Env = append(os.Environ(), "D="+dir, "NO_COLOR=1")
			cmd.Stdin = strings.NewReader("") // serve ends at the end of its input
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("serve --ledger %s: %v\n%s", c.ledger, err, errb.String())
			}
			warned := strings.Contains(errb.String(), "effectfence: warning: ledger "+c.ledger+" ")
			switch {
			case c.want == "" && warned:
				t.Fatalf("a ledger on this disk was warned about:\n%s", errb.String())
			case c.want != "" && (!warned || !strings.Contains(errb.String(), c.want) || !strings.Contains(errb.String(), "runs again")):
				t.Fatalf("serve on a %s ledger said nothing of it; want %q on stderr:\n%s", c.name, c.want, errb.String())
			}
			if out.Len() != 0 {
				t.Fatalf("stdout carried %q", out.String())
			}
		})
	}
}
