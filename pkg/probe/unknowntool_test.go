package probe_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/shserver"
	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

// TestProbeUnknownToolOfALongListIsOneShortLine: a tool the server does not have is a usage
// error that names the tools it has, but no more than a screenful of them, however many the
// server lists and however long their names. Before 2026-12-07 every name went into the one
// line: a server of 5,000 tools of 1,000 characters made a 5 MB usage "line" on stderr, and
// as much again in --json's error on stdout.
func TestProbeUnknownToolOfALongListIsOneShortLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var tools []map[string]any
	for i := range 5000 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%04d_%s", i, strings.Repeat("x", 1000)), "inputSchema": map[string]any{"type": "object"}})
	}
	srv := shserver.Listing(t, dir, map[string]any{"tools": tools}, "exit 3")
	for _, asJSON := range []bool{false, true} {
		args := []string{"probe", "--tool", "nope", "--calls", "2", "--", srv}
		if asJSON {
			args = append([]string{"probe", "--json"}, args[1:]...)
		}
		r := cmdtest.Run(t, nil, bin, args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, `no tool "nope"`) || !strings.Contains(r.Stderr, "tool_0000_") || !strings.Contains(r.Stderr, "and 4980 more") {
			t.Errorf("--json %v: exit %d, stderr %.300q", asJSON, r.Code, r.Stderr)
		}
		if len(r.Stderr) > 8<<10 || len(r.Stdout) > 8<<10 {
			t.Errorf("--json %v: a usage error of %d bytes on stderr and %d on stdout", asJSON, len(r.Stderr), len(r.Stdout))
		}
	}
}
