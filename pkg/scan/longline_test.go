package scan

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLongLineOfRegistrationsIsNotQuadratic: a file of one long line holding thousands of
// registration calls is read in bytes allocated in proportion to the file, not to the file
// times its matches. Before 2026-12-07 each match copied its whole line (registrationSites'
// line, definitionAt's prefix), so a 1 MiB line of `server.tool("a",` took 39 s and 300 MB;
// here a 256 KiB one allocated 6.3 GB (35 MB since; about 900 MB under -race, whose
// sync.Pool drops some of what regexp puts back). Measured in bytes allocated, not in time,
// and not run in parallel: the heap's counters are the process's.
func TestLongLineOfRegistrationsIsNotQuadratic(t *testing.T) {
	root := t.TempDir()
	line := strings.Repeat(`server.tool("a",`, (256<<10)/len(`server.tool("a",`))
	if err := os.WriteFile(filepath.Join(root, "one.ts"), []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rep := scanDir(t, root, Options{})
	runtime.ReadMemStats(&after)
	if rep.Files.Scanned != 1 {
		t.Fatalf("scanned %d files, want 1 (skipped %v)", rep.Files.Scanned, rep.Skipped)
	}
	const limit = 2 << 30
	if got := after.TotalAlloc - before.TotalAlloc; got > limit {
		t.Fatalf("scanning a 256 KiB file of one line allocated %d MB, more than %d MB", got>>20, limit>>20)
	}
}
