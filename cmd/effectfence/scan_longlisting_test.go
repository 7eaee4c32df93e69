package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/shserver"
)

// TestScanRunListingIsBoundedInBytes: scan --run against a server whose tools/list pages
// never end (a nextCursor on every page), each 2 MiB, gives up once the pages pass 64 MiB
// together (exit 1, an error, never an empty list). Before 2026-12-07 every page was kept
// until --run-timeout: 10 MB pages took scan to 3.4 GB in the 30 s.
func TestScanRunListingIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "src")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	var tools []map[string]any
	for i := range 200 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%03d_%s", i, strings.Repeat("x", 10<<10)), "inputSchema": map[string]any{"type": "object"}})
	}
	srv := shserver.Listing(t, dir, map[string]any{"tools": tools, "nextCursor": "again"}, "")
	r := runBinary(t, nil, "", "scan", "--json", "--run", "--run-timeout", "5m", empty, "--", srv)
	if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "tools/list is longer than 64 MiB") {
		t.Errorf("exit %d, stdout %.200q, stderr %.400q", r.code, r.stdout, r.stderr)
	}
}
