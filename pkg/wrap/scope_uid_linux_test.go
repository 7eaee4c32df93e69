package wrap_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// docs/identity.md, "What the scope cannot see": the user a server runs as is not in the
// scope. Two wraps of the same command, in the same directory and with the same environment,
// run by two users (root and nobody, as setpriv, a service manager's User= with the same
// Environment=, or a container's USER with HOME set in the image do) on one PostgreSQL
// ledger are one scope: the second user's call is answered with the first user's receipt and
// does not run.
func TestScopeCannotSeeTheUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a wrap as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv")
	}
	_, ledger := cutLedger(t)
	// A directory both users can use, with copies of the two binaries in it (the build's
	// directories are root's alone).
	shared, err := os.MkdirTemp("", "scope-uid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{}
	for name, src := range map[string]string{"effectfence": efBin, "server": testExe} {
		dst := filepath.Join(shared, name)
		copyFile(t, src, dst)
		bins[name] = dst
	}
	effects := filepath.Join(shared, "effects")
	if err := os.WriteFile(effects, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(effects, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	var logs []string
	uidFile := filepath.Join(shared, "uid")
	asNobody := []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/bin/sh", "-c", `id -u >"$0"; exec "$@"`, uidFile}
	for i, user := range [][]string{nil, asNobody} {
		r := newRig(t)
		r.dir, r.effects, r.ledger, r.workDir = shared, effects, ledger, shared
		r.prefix = user
		r.childCmdOverride = []string{bins["server"], "-test.run=^$"}
		r.bin = bins["effectfence"]
		w := r.wrap()
		x := call(t, w.Session, "charge", `{"amount":7}`)
		w.Close()
		logs = append(logs, w.log.String())
		if x.IsError {
			t.Fatalf("user %d: %+v\n%s", i, x, w.log.String())
		}
		if i == 1 && !x.replayed() {
			t.Fatalf("the second user's call ran on its own: the scope told the users apart, and docs/identity.md says it cannot: %+v", x)
		}
	}
	if b, err := os.ReadFile(uidFile); err != nil || strings.TrimSpace(string(b)) != "65534" {
		t.Fatalf("the second wrap did not run as nobody: %q %v", b, err)
	}
	if n := len(mcptest.Effects(effects)); n != 1 {
		t.Fatalf("want 1 charge (the second user's answered with the first's receipt), got %d", n)
	}
	scope := func(log string) string {
		_, after, _ := strings.Cut(log, "effectfence wrap: scope ")
		id, _, _ := strings.Cut(after, ":")
		return id
	}
	if a, b := scope(logs[0]), scope(logs[1]); a == "" || a != b {
		t.Fatalf("the two users' scopes: %q and %q", a, b)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
