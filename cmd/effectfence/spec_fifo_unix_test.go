//go:build unix

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConfigFileThatIsANamedPipeIsRefused names a FIFO that nothing writes to as a policy
// file or a keys file: each command says the file gave nothing (exit 2, nothing on stdout)
// instead of waiting for ever for a writer (os.Open of a FIFO), which left wrap, started by
// an MCP client that shows nothing, and `policy check` hanging without a word. A ledger path
// that is a FIFO was already refused.
func TestConfigFileThatIsANamedPipeIsRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"policy", "check", fifo}, "the file is empty"},
		{nil, []string{"wrap", "--ledger", "memory", "--policy", fifo, "--", "true"}, "the file is empty"},
		{[]string{envPolicy, fifo}, []string{"wrap", "--ledger", "memory", "--", "true"}, "the file is empty"},
		{nil, []string{"ledger", "ls", "--for", "--policy", fifo, "--", "true"}, "the file is empty"},
		{nil, []string{"wrap", "--ledger", "memory", "--listen", "127.0.0.1:0", "--api-keys", fifo, "--", "true"}, "no keys"},
		{[]string{envAPIKeys, fifo}, []string{"wrap", "--ledger", "memory", "--listen", "127.0.0.1:0", "--", "true"}, "no keys"},
	} {
		t.Run(strings.Join(c.args[:2], " "), func(t *testing.T) {
			if c.env != nil {
				t.Setenv(c.env[0], c.env[1])
			}
			type answer struct {
				code        int
				out, errout string
			}
			done := make(chan answer, 1)
			go func() {
				var out, errw bytes.Buffer
				code := run(context.Background(), append([]string{"effectfence"}, c.args...), streams{strings.NewReader(""), &out, &errw})
				done <- answer{code, out.String(), errw.String()}
			}()
			select {
			case a := <-done:
				if a.code != exitUsage || a.out != "" || !strings.Contains(a.errout, c.want) || !strings.Contains(a.errout, fifo) {
					t.Fatalf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q naming the file", c.args, a.code, a.out, a.errout, exitUsage, c.want)
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("%v did not return within two minutes: it waits for a writer of the FIFO", c.args)
			}
		})
	}
}
