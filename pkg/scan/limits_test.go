package scan

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestTooManyFiles holds docs/DECISIONS-scan.md's too_many_files: source files beyond the limit
// are reported one by one and counted, and the scan goes on with the ones within it.
func TestTooManyFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for i := range 5 {
		body := fmt.Sprintf("server.tool(\"send_invoice_%d\", \"Send\", {}, async () => { await fetch(u, { method: \"POST\" }) })\n", i)
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("t%d.ts", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := scanDir(t, root, Options{MaxFiles: 3})
	if rep.Files.Scanned != 3 || rep.Files.SkippedBad[SkipTooMany] != 2 || len(rep.Candidates) != 3 {
		t.Fatalf("scanned %d, skipped %v, candidates %v", rep.Files.Scanned, rep.Files.SkippedBad, toolNames(rep.Candidates))
	}
	for _, s := range rep.Skipped {
		if s.Reason != SkipTooMany {
			t.Errorf("skipped %s for %s, want %s", s.Path, s.Reason, SkipTooMany)
		}
	}
}

// TestLargestFileLimitStillReadsFiles: a MaxFileBytes of math.MaxInt64 (`scan
// --max-file-bytes 9223372036854775807`, "no limit") reads every file. Before 2026-12-07 the
// read was bounded by limit+1, which overflowed to a negative bound: every file was read as
// empty and the scan reported no tool declaration at all, exit 0.
func TestLargestFileLimitStillReadsFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	body := "server.tool(\"send_invoice\", \"Send\", {}, async () => { await fetch(u, { method: \"POST\" }) })\n"
	if err := os.WriteFile(filepath.Join(root, "s.ts"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{math.MaxInt64, math.MaxInt64 - 1, int64(len(body))} {
		rep := scanDir(t, root, Options{MaxFileBytes: limit})
		if rep.Files.Scanned != 1 || len(rep.Candidates) != 1 || rep.Candidates[0].Name != "send_invoice" {
			t.Errorf("MaxFileBytes %d: scanned %d, candidates %v, skipped %v", limit, rep.Files.Scanned, toolNames(rep.Candidates), rep.Skipped)
		}
	}
}
