package sqlite_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestLedgerFileMountedAloneIsRefused: a ledger file bind-mounted on its own into another mount
// namespace (docker -v /srv/ledger.db:/data/ledger.db) is refused there. SQLite would keep its
// write-ahead log beside the mount point, outside the mounted file: a decision committed
// there, its process killed before a checkpoint, is missing from the file under its own name,
// and its duplicate would run again. The holder (a real process in its own mount namespace,
// as a container is) must not open it; `ledger check` there names the problem; nothing is
// created beside the mount point.
func TestLedgerFileMountedAloneIsRefused(t *testing.T) {
	unshare := needUnshare(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "host", "ledger.db")
	st, err := sqlite.Open(ctx, real, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	point := filepath.Join(dir, "the container", "ledger.db") // a space: mountinfo writes it \040
	if err := os.MkdirAll(filepath.Dir(point), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(point, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// inMountNS runs this test binary, with env, in a mount namespace of its own where point
	// is real, mounted alone.
	inMountNS := func(env ...string) *exec.Cmd {
		cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", "sh", "-c",
			`mount --bind "$EFFECTFENCE_TEST_FROM" "$EFFECTFENCE_TEST_TO" && exec "$0" -test.run='^$'`, exe)
		cmd.Env = append(append(os.Environ(), "EFFECTFENCE_TEST_FROM="+real, "EFFECTFENCE_TEST_TO="+point), env...)
		return cmd
	}
	cmd := inMountNS("EFFECTFENCE_TEST_HOLDER=1", "EFFECTFENCE_TEST_LEDGER="+point,
		"EFFECTFENCE_TEST_INTENT=mounted:1", fmt.Sprintf("EFFECTFENCE_TEST_LEASE_MS=%d", time.Hour.Milliseconds()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	if lines.Scan() && strings.HasPrefix(lines.Text(), "owner ") {
		// It opened the mounted file and claimed: show what that costs. Commit, kill -9 before
		// any checkpoint, and look at the file under its own name.
		lines.Scan() // claimed
		fmt.Fprintln(in, "commit")
		lines.Scan()
		said := lines.Text()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		eng := fence.New(openT(t, real, sqlite.Options{}), fence.Config{})
		adm, err := eng.Prepare(context.Background(), holderReq("mounted:1"))
		t.Fatalf("the holder opened a ledger file mounted alone and said %q; killed, the file under its own name answers the duplicate with fresh=%v (err %v): the receipt is in %s-wal, outside the file",
			said, err == nil && adm.Fresh(), err, point)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(stderr.String(), "is a file mounted on its own") || !strings.Contains(stderr.String(), "mount the directory") {
		t.Fatalf("holder on a ledger file mounted alone: %v, stderr %q; want it refused, saying why and what to do", err, stderr.String())
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Stat(point + suffix); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused open left %s%s beside the mount point: %v", point, suffix, err)
		}
	}

	// ledger check, in such a namespace, reports it and creates nothing either.
	got, err := inMountNS("EFFECTFENCE_TEST_CHECK=" + point).CombinedOutput()
	if err != nil || !strings.Contains(string(got), "file mounted alone") || !strings.Contains(string(got), "mount the directory") {
		t.Fatalf("ledger check of a file mounted alone: %v\n%s", err, got)
	}
	if _, err := os.Stat(point + "-shm"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("check left %s-shm beside the mount point: %v", point, err)
	}
}
