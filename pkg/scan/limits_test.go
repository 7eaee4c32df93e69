package scan

import (
	"fmt"
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
