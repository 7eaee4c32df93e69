//go:build unix

package postgres

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// poolerUser makes cmd run as the user postgres (else nobody) when the test runs as root
// (PgBouncer refuses to run as root), and hands dir and every file in it to that user, so PgBouncer can read its
// configuration and write its log there. As any other user it does nothing.
func poolerUser(tb testing.TB, cmd *exec.Cmd, dir string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		// A machine whose PostgreSQL runs elsewhere may have no such user.
		if u, err = user.Lookup("nobody"); err != nil {
			tb.Fatalf("pgbouncer refuses to run as root, and there is no user postgres or nobody to run it as: %v", err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		tb.Fatalf("user %s: uid %q: %v", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		tb.Fatalf("user %s: gid %q: %v", u.Username, u.Gid, err)
	}
	err = filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, int(uid), int(gid))
	})
	if err != nil {
		tb.Fatalf("handing %s to user %s: %v", dir, u.Username, err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
}
