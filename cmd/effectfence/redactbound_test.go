package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// wrap refuses at start a tool whose --redact flags, alone or over the policy file's, name
// more paths than the fence takes in one request: it started, and every fenced call of the
// tool was answered "cannot be fenced (invalid_request: redact: names 65 paths; at most 64);
// it was NOT executed" (docs/wrap.md: per-tool flags are checked at start).
func TestWrapRefusesMoreRedactPathsThanTheFenceTakes(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	flags := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, "--redact", fmt.Sprintf("charge_card:%s%d", prefix, i))
		}
		return out
	}
	server := []string{"--", os.Args[0], "-test.run=^$"}
	args := append(append([]string{"wrap", "--ledger", "memory"}, flags("f", fence.MaxRedactPaths+1)...), server...)
	code, out, errOut := runCLI(t, "", args...)
	if code != exitUsage || out != "" || !strings.Contains(errOut, `"charge_card"`) || !strings.Contains(errOut, fmt.Sprint(fence.MaxRedactPaths)) {
		t.Fatalf("%d --redact paths of one tool: exit %d, stdout %q, stderr %q", fence.MaxRedactPaths+1, code, out, errOut)
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	var items []string
	for i := range fence.MaxRedactPaths / 2 {
		items = append(items, fmt.Sprintf("d%d", i))
	}
	if err := os.WriteFile(pol, []byte("version: 1\ndefaults:\n  redact: ["+strings.Join(items, ", ")+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append(append([]string{"wrap", "--ledger", "memory", "--policy", pol}, flags("f", fence.MaxRedactPaths/2+1)...), server...)
	code, out, errOut = runCLI(t, "", args...)
	if code != exitUsage || out != "" || !strings.Contains(errOut, `"charge_card"`) || !strings.Contains(errOut, fmt.Sprint(fence.MaxRedactPaths)) {
		t.Fatalf("--redact flags over the policy's, %d paths in all: exit %d, stdout %q, stderr %q", fence.MaxRedactPaths+1, code, out, errOut)
	}
}
