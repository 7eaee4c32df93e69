//go:build unix

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestScanOfAnUnreadableFolderIsAUsageError: a PATH that exists but cannot be listed is a bad
// path (exit 2, nothing on stdout), as a missing one is, and with --run the server is not
// started. Before 2026-12-07 the scan "completed": exit 0, "0 source files read", no tool
// found, the folder itself listed as skipped, and --json a report a CI job would read as a
// clean zero. Root lists every folder, so the binary runs as nobody there.
func TestScanOfAnUnreadableFolderIsAUsageError(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	// nobody must reach the binary and the folder: open the way there.
	for d := top; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(top, "effectfence")
	b, err := os.ReadFile(plainBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(top, "server")
	if err := os.MkdirAll(filepath.Join(root, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := `server.tool("send_invoice", "Send", {}, async () => { await fetch(u, { method: "POST" }) })` + "\n"
	if err := os.WriteFile(filepath.Join(root, "src", "s.ts"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	marks := filepath.Join(top, "marks")
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(marks, 0o777); err != nil { // past the umask: nobody writes here
		t.Fatal(err)
	}
	started := filepath.Join(marks, "started")
	server := filepath.Join(top, "server.sh")
	if err := os.WriteFile(server, []byte("#!/bin/sh\n: > "+started+"\nexec cat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o311); err != nil { // entered, not listed
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(root, 0o755) })

	run := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errb.String()
	}
	for _, args := range [][]string{
		{"scan", root},
		{"scan", "--json", root},
		{"scan", "--sarif", root},
		{"scan", "--run", root, "--", server},
	} {
		code, stdout, stderr := run(args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "cannot be read") || !strings.Contains(stderr, "permission denied") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2, nothing on stdout, and why", args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("scan --run started the server for a folder it cannot read")
	}
	// A folder inside PATH that cannot be read is still skipped and listed, the scan going on.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "src"), 0o311); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, "src"), 0o755) })
	code, stdout, stderr := run("scan", root)
	if code != exitOK || !strings.Contains(stdout, "src  unreadable") {
		t.Errorf("an unreadable folder inside PATH: exit %d, stdout %q, stderr %q; want 0 and it listed as skipped", code, stdout, stderr)
	}
}
