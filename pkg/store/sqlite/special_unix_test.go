//go:build unix

package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestSpecialFileBesideALedgerIsNamed puts a named pipe, or a directory, where a ledger's
// write-ahead log or index belongs (LEDGER-wal, LEDGER-shm). Before 2026-12-06 a pipe as the
// log hung every open of the ledger and `ledger check` for ever (each read of it waits for a
// writer), and as the index made both fail with a bare "disk I/O error", which the check took
// for a damaged ledger and advised salvaging. Each is now refused naming the thing and the way
// out, the ledger file left as it was; once it is moved away the ledger opens with its
// records. The bound below is on a hang, not on speed.
func TestSpecialFileBesideALedgerIsNamed(t *testing.T) {
	for _, c := range []struct{ suffix, kind string }{{"-wal", "a named pipe (FIFO)"}, {"-shm", "a named pipe (FIFO)"}, {"-wal", "a directory"}} {
		t.Run(c.suffix+" "+c.kind, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			seedLedger(t, path, 2)
			sum := fileSum(t, path)
			odd := path + c.suffix
			var err error
			if c.kind == "a directory" {
				err = os.Mkdir(odd, 0o700)
			} else {
				err = syscall.Mkfifo(odd, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan string, 1)
			go func() {
				var got []string
				for _, ro := range []bool{false, true} {
					st, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: ro})
					if err == nil {
						st.Close()
					}
					got = append(got, fmt.Sprintf("open (read-only %v): %v", ro, err))
				}
				r, err := sqlite.Check(ctx, path)
				got = append(got, fmt.Sprintf("check: %v %+v", err, r))
				done <- strings.Join(got, "\n")
			}()
			var got string
			select {
			case got = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("opening or checking the ledger with %s as %s hangs", c.kind, odd)
			}
			want := fmt.Sprintf("has %s where its", c.kind)
			if strings.Count(got, want) != 3 || !strings.Contains(got, "mv "+odd+" "+odd+".aside") || !strings.Contains(got, "Kind:special file beside it") {
				t.Fatalf("the ledger with %s as %s:\n%s\nwant every open and the check refused naming it (%q), with the way out", c.kind, odd, got, want)
			}
			if fileSum(t, path) != sum {
				t.Fatal("the ledger file changed")
			}
			if err := os.Rename(odd, odd+".aside"); err != nil {
				t.Fatal(err)
			}
			if err := useLedger(path); err != nil {
				t.Fatalf("the ledger, the thing moved away: %v", err)
			}
		})
	}
}
