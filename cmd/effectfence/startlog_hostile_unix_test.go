//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestWrapStartLogEscapesItsPaths: wrap's startup log names the directory it runs in (the
// scope's), the ledger file and the earlier default files of the same setup, paths that come
// from wherever the MCP client was started: a repository's directory can be named with an
// escape sequence or a line break (git keeps either). The log is one line per fact, with
// control characters escaped (docs/wrap.md), so such a name can neither set the terminal's
// title nor add a line of its own ("effectfence wrap: ledger …", say). Before, the directory
// and the paths were written as they were.
func TestWrapStartLogEscapesItsPaths(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	root := t.TempDir()
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	const hostile = "proj\x1b]0;pwned\x07\neffectfence wrap: ledger elsewhere.db"
	dir, link, state := filepath.Join(root, hostile), filepath.Join(root, "link\x1b[5m"), filepath.Join(root, "state\x1b[2J")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostile, link); err != nil {
		t.Fatal(err)
	}
	child := []string{bin, "demo-server", "--latency", "0s"}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "XDG_STATE_HOME=" + state, "GORACE=atexit_sleep_ms=0"}
	// The default file the same setup had before 2026-12-03 (the directory through the link
	// in $PWD), so that wrap names an earlier file too.
	old := filepath.Join(state, "effectfence", store.WrapScope(child, "", env, link).LedgerName()+".db")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, nil, 0o600); err != nil {
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
	for _, got := range []string{run(append([]string{"wrap", "--"}, child...)...), run(append([]string{"ledger", "ls", "--for", "--"}, child...)...)} {
		if strings.ContainsAny(got, "\x1b\x07") {
			t.Errorf("the log writes a path's escape sequence as it is:\n%q", got)
		}
		for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
			if strings.HasPrefix(line, "effectfence wrap: ledger elsewhere.db") {
				t.Errorf("a directory's name added a line of its own to the log:\n%s", got)
			}
		}
		if !strings.Contains(got, "from before 2026-12-03") || !strings.Contains(got, `\x1b`) {
			t.Errorf("the log does not show the escaped path:\n%q", got)
		}
	}
}
