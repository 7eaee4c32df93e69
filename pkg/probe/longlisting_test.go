package probe_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/shserver"
	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

// TestProbeListingIsBoundedInBytes: a server whose tools/list pages never end (a nextCursor
// on every page), each page 2 MiB of tool names, is given up once its pages pass 64 MiB
// together, before the 100-page bound: the names read are kept, and 100 pages of 10 MB took
// the probe to 1.7 GB (of 60 MB, more than most machines have). Exit 1, nothing called.
func TestProbeListingIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var tools []map[string]any
	for i := range 200 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%03d_%s", i, strings.Repeat("x", 10<<10)), "inputSchema": map[string]any{"type": "object"}})
	}
	calls := filepath.Join(dir, "calls")
	srv := shserver.Listing(t, dir, map[string]any{"tools": tools, "nextCursor": "again"}, "echo call >> '"+calls+"'")
	// --timeout 10m: the shell server takes a while to write 64 MiB on a loaded machine (at a
	// load of 20, longer than probe's default minute, which then ended it first).
	r := cmdtest.Run(t, nil, bin, "probe", "--tool", "t", "--calls", "2", "--timeout", "10m", "--", srv)
	if r.Code != 1 || !strings.Contains(r.Stderr, "tools/list is longer than 64 MiB") || !strings.Contains(r.Stderr, "nothing was called") {
		t.Errorf("exit %d, stderr %.400q", r.Code, r.Stderr)
	}
	if _, err := os.Stat(calls); err == nil {
		t.Error("the tool was called")
	}
}
