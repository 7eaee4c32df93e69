package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLedgerSubcommandsRefuseATornFile: every subcommand (not only ls, which
// TestLedgerCheckDamaged runs) refuses a truncated or corrupt ledger file with exit 1, nothing
// on stdout and an error that names `effectfence ledger check`, and leaves the file as it was
// (docs/ledger.md: "nothing is changed"): clear, resolve and sweep, which write, included.
func TestLedgerSubcommandsRefuseATornFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	seedCLI(t, good)
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 3*4096 {
		t.Fatalf("the seeded ledger is %d bytes; the cases below need three pages", len(b))
	}
	cases := map[string][]byte{
		"truncated":      b[:len(b)/2],
		"cut mid-header": b[:50],
		"corrupt page":   append(append(bytes.Clone(b[:4096]), bytes.Repeat([]byte{0x5a}, 4096)...), b[8192:]...),
	}
	subs := [][]string{
		{"ls"}, {"ls", "--json"}, {"show", "refund:9"}, {"verify"}, {"export"}, {"stats"}, {"sweep"},
		{"clear", "refund:9", "--reason", "checked"},
		{"resolve", "refund:9", "--did-not-happen", "--reason", "checked"},
	}
	for name, content := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".db")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, sub := range subs {
			args := append(append([]string{"ledger"}, sub...), "--ledger", path)
			r := runBinary(t, []string{"NO_COLOR=1"}, "", args...)
			if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "effectfence ledger check") {
				t.Errorf("%s: %q: exit %d\nstdout %q\nstderr %s", name, sub, r.code, r.stdout, r.stderr)
			}
			after, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(after, content) {
				t.Fatalf("%s: %q changed the file (%v)", name, sub, err)
			}
			if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() != 0 {
				t.Fatalf("%s: %q wrote %d bytes of write-ahead log beside the file", name, sub, fi.Size())
			}
		}
	}
}
