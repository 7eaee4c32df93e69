//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestScopeDirectoryIsTheRealDirectory: the scope holds the directory the server runs in
// (docs/identity.md). A shell that `cd`s through a symlink keeps the link's path in $PWD, and
// os.Getwd answers $PWD whenever it names the same directory, so the scope held the link's
// path, not the directory. Two real wraps of one demo server on one shared ledger file, each
// charging into an effects file in its working directory:
//
//   - started in `current` while it points at release A, then at release B: two directories,
//     two servers; before, the charge in B was answered with A's receipt and never ran;
//   - started in B by its real path, without $PWD (an MCP client that sets the cwd): the same
//     directory as the second launch, so its duplicate is replayed; before, it ran again.
func TestScopeDirectoryIsTheRealDirectory(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	root := t.TempDir()
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r // the temporary directory itself may be reached through a link (macOS)
	}
	relA, relB, current := filepath.Join(root, "release-a"), filepath.Join(root, "release-b"), filepath.Join(root, "current")
	for _, d := range []string{relA, relB} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ledger := filepath.Join(t.TempDir(), "shared.db")
	child := []string{bin, "demo-server", "--latency", "0s", "--effects", "effects"} // relative: in the working directory
	const session = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}` + "\n"
	wrapIn := func(dir string, env ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"wrap", "--grace", "60s", "--ledger", ledger, "--"}, child...)...)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0", "PWD=", store.EnvLedger+"="), env...)
		cmd.Stdin = strings.NewReader(session)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil || !strings.Contains(out.String(), `"id":1`) {
			t.Fatalf("wrap in %s: %v\nstdout %s\nstderr %s", dir, err, out.String(), errb.String())
		}
		return result{0, out.String(), errb.String()}
	}
	executions := func(dir string) int {
		b, _ := os.ReadFile(filepath.Join(dir, "effects"))
		return strings.Count(string(b), "\n")
	}
	replayed := func(r result) bool { return strings.Contains(r.stdout, `"effectfence/replayed":true`) }

	if err := os.Symlink("release-a", current); err != nil {
		t.Fatal(err)
	}
	if r := wrapIn(current, "PWD="+current); replayed(r) || executions(relA) != 1 {
		t.Fatalf("the first charge, in release A: replayed %v, %d executions there", replayed(r), executions(relA))
	}
	// The deploy points `current` at release B: another directory, another server.
	if err := os.Remove(current); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("release-b", current); err != nil {
		t.Fatal(err)
	}
	second := wrapIn(current, "PWD="+current)
	if replayed(second) || executions(relB) != 1 {
		t.Errorf("the charge in release B (reached as %s, as release A was) was answered with release A's receipt: replayed %v, %d executions in B, %d in A\nstderr %s",
			current, replayed(second), executions(relB), executions(relA), second.stderr)
	}
	// The same server, started in B by its real path: the same scope, so its duplicate replays.
	third := wrapIn(relB)
	if !replayed(third) || executions(relB) > 1 {
		t.Errorf("the duplicate in release B, reached by its real path: replayed %v, %d executions in B; want a replay and 1\nstderr %s",
			replayed(third), executions(relB), third.stderr)
	}
}

// TestWrapNamesTheLedgerOfTheSymlinkedDirectory: a wrap started through a symlink had the
// link's path in its scope before the directory was taken by its real path, so its default
// ledger file was another; a call left unknown there is not fenced by the new file, so wrap
// names the old file at startup when it exists.
func TestWrapNamesTheLedgerOfTheSymlinkedDirectory(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	root := t.TempDir()
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	real, link, state := filepath.Join(root, "real"), filepath.Join(root, "link"), t.TempDir()
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	child := []string{bin, "demo-server", "--latency", "0s"}
	// The whole environment, so the test can name the scope it gave before.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "XDG_STATE_HOME=" + state, "GORACE=atexit_sleep_ms=0"}
	old := filepath.Join(state, "effectfence", store.WrapScope(child, "", env, link).LedgerName()+".db")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env = link, append(env, "PWD="+link)
		cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("effectfence %v: %v\n%s", args, err, errb.String())
		}
		return errb.String()
	}
	run(append([]string{"wrap", "--ledger", old, "--"}, child...)...) // the file the earlier scope used
	got := run(append([]string{"wrap", "--"}, child...)...)
	if want := "from before 2026-12-03 (the directory " + real + " by its real path; terminal and session variables left out) exists at " + old; !strings.Contains(got, want) {
		t.Fatalf("wrap's startup log does not say %q:\n%s", want, got)
	}
	if !strings.Contains(got, "directory "+real+" and") {
		t.Fatalf("wrap's startup log does not name the real directory %s:\n%s", real, got)
	}
	// The operator's view from the same setup names it too: the calls left unknown there
	// are not in the file it shows.
	got = run(append([]string{"ledger", "ls", "--for", "--"}, child...)...)
	if want := "from before 2026-12-03 (the directory by its real path; terminal and session variables left out) exists at " + old; !strings.Contains(got, want) {
		t.Fatalf("ledger ls --for does not say %q:\n%s", want, got)
	}
}
