//go:build unix

package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestSpecialFilesAreNoLedger names a named pipe, /dev/null and /dev/zero (through a link)
// as the ledger: SQLite reads them as an empty database or fails with a bare "disk I/O
// error", so opening must refuse each as not a file, for writing and read-only, and Check
// must not report an OK empty ledger that would become one on first use.
func TestSpecialFilesAreNoLedger(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{fifo: "a named pipe (FIFO)"}
	for _, dev := range []string{"/dev/null", "/dev/zero"} {
		if fi, err := os.Stat(dev); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			continue
		}
		link := filepath.Join(dir, filepath.Base(dev)+".db")
		if err := os.Symlink(dev, link); err != nil {
			t.Fatal(err)
		}
		paths[link] = "a character device"
	}
	for path, kind := range paths {
		for _, ro := range []bool{false, true} {
			st, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: ro})
			if err == nil {
				st.Close()
				t.Errorf("%s (read-only %v) opened as a ledger", path, ro)
				continue
			}
			if !strings.Contains(err.Error(), kind+", not a file") {
				t.Errorf("open %s (read-only %v): %v; want it named %s, not a file", path, ro, err, kind)
			}
		}
		rep, err := sqlite.Check(ctx, path)
		if err == nil && rep.OK {
			t.Errorf("Check(%s) reports an OK ledger: %+v", path, rep)
		} else if err != nil && !strings.Contains(err.Error(), kind) {
			t.Errorf("Check(%s): %v; want it named %s", path, err, kind)
		}
	}
}
