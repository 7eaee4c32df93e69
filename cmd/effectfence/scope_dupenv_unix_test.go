//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestScopeOfADuplicatedVariableIsTheCopyTheServerSees: execve takes an environment with a
// name given twice, and programs disagree about which copy counts (glibc's getenv and Go take
// the first, a shell the last). wrap must hash the copy its server acts on. wrap is started
// here with a raw environment (os.StartProcess, which passes it as given), and its server is a
// shell that charges into the effects file its ACCOUNT names: [A, B] and [A, C] act for A (the
// second is replayed from the first, as the same server), [B, A] acts for B (another server:
// it runs). All on one shared ledger file.
func TestScopeOfADuplicatedVariableIsTheCopyTheServerSees(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "shared.db")
	const session = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}` + "\n"
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	script := `exec "$EF_BIN" demo-server --latency 0s --effects "$EF_DIR/$ACCOUNT.effects"`
	run := func(accounts ...string) string {
		t.Helper()
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GORACE=atexit_sleep_ms=0", "EF_BIN=" + bin, "EF_DIR=" + dir}
		for _, a := range accounts {
			env = append(env, "ACCOUNT="+a)
		}
		stdin, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r, stdout, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p, err := os.StartProcess(bin, []string{bin, "wrap", "--grace", "60s", "--ledger", ledger, "--", sh, "-c", script},
			&os.ProcAttr{Dir: dir, Env: env, Files: []*os.File{stdin, stdout, os.Stderr}})
		stdin.Close()
		stdout.Close()
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = w.WriteString(session); w.Close() }()
		var out bytes.Buffer
		done := make(chan struct{})
		go func() { _, _ = out.ReadFrom(r); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			_ = p.Kill()
			t.Fatalf("wrap with ACCOUNT %v did not finish", accounts)
		}
		_, _ = p.Wait()
		r.Close()
		if !strings.Contains(out.String(), `"id":1`) {
			t.Fatalf("wrap with ACCOUNT %v: %s", accounts, out.String())
		}
		return out.String()
	}
	effects := func(account string) int {
		b, _ := os.ReadFile(filepath.Join(dir, account+".effects"))
		return strings.Count(string(b), "\n")
	}
	replayed := func(s string) bool { return strings.Contains(s, `"effectfence/replayed":true`) }

	if out := run("A", "B"); replayed(out) || effects("A") != 1 || effects("B") != 0 {
		t.Fatalf("[A, B]: replayed %v, effects A %d B %d; want it run for A (the first copy)", replayed(out), effects("A"), effects("B"))
	}
	if out := run("A", "C"); !replayed(out) || effects("A") != 1 || effects("C") != 0 {
		t.Errorf("[A, C], the same server for A: replayed %v, effects A %d C %d; want a replay", replayed(out), effects("A"), effects("C"))
	}
	if out := run("B", "A"); replayed(out) || effects("B") != 1 {
		t.Errorf("[B, A], the server for B: replayed %v, effects B %d A %d; want it run for B, not A's receipt", replayed(out), effects("B"), effects("A"))
	}
}
