package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestServeAndWrapRefuseABadLedger runs the real binary as an MCP client would, with a ledger
// file that another program wrote or that a newer effectfence wrote: serve and wrap refuse to
// start (exit 1) with an error naming `effectfence ledger check` (docs/ledger.md), write
// nothing to stdout (it carries protocol only), leave the file as it was, and wrap starts no
// MCP server: a wrap that served without its ledger would run calls that the ledger may have
// recorded as done, or that other processes are running.
func TestServeAndWrapRefuseABadLedger(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	newer := filepath.Join(t.TempDir(), "newer.db")
	seedCLI(t, newer)
	setSchemaVersion(t, newer, sqlite.SchemaVersion+1)
	newerBytes, err := os.ReadFile(newer)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"foreign": []byte("name,amount\nalice,3\n"),
		"newer":   newerBytes,
	}
	session := serveSession(
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"record_event","arguments":{"name":"x"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"a","tool":"t"}}}`)
	for name, content := range files {
		for _, entry := range []string{"serve", "wrap"} {
			t.Run(name+"/"+entry, func(t *testing.T) {
				dir := t.TempDir()
				path, marker := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "child-started")
				if err := os.WriteFile(path, content, 0o600); err != nil {
					t.Fatal(err)
				}
				args := []string{"serve", "--ledger", path}
				if entry == "wrap" {
					args = []string{"wrap", "--ledger", path, "--", "sh", "-c", `touch "$1"; exec "$2" demo-server --latency 0s`, "sh", marker, bin}
				}
				r := runBinary(t, []string{store.EnvLedger + "="}, session, args...)
				if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "effectfence ledger check --ledger "+path) {
					t.Fatalf("%s on a %s ledger: exit %d\nstdout %q\nstderr %s", entry, name, r.code, r.stdout, r.stderr)
				}
				after, err := os.ReadFile(path)
				if err != nil || !bytes.Equal(after, content) {
					t.Fatalf("%s changed the %s ledger (%v)", entry, name, err)
				}
				if _, err := os.Stat(marker); !os.IsNotExist(err) {
					t.Fatalf("wrap started the MCP server without its ledger (%v)", err)
				}
			})
		}
	}
}
