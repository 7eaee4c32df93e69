package sqlite_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// seedLedger makes a closed ledger with enough records to span many pages.
func seedLedger(t *testing.T, path string, n int) {
	t.Helper()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng := fence.New(st, fence.Config{})
	for i := range n {
		r := fence.Request{Intent: fmt.Sprintf("seed:%04d", i), Tool: "charge", Args: []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("x", 200)))}
		adm, err := eng.Prepare(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// useLedger opens the ledger and reads every record, as a process starting up and serving
// would; any error is returned (never a panic).
func useLedger(path string) error {
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	eng := fence.New(st, fence.Config{})
	if _, err := eng.Recover(ctx); err != nil {
		return err
	}
	return st.View(ctx, func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(*fence.Record) bool { return true })
	})
}

func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	seedLedger(t, good, 300)
	goodBytes, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(goodBytes) < 20*4096 {
		t.Fatalf("seed ledger is only %d bytes; the damage cases need more pages", len(goodBytes))
	}
	foreignSQLite := filepath.Join(dir, "foreign.sqlite")
	db, err := sql.Open("sqlite", foreignSQLite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE photos(id INTEGER PRIMARY KEY, name TEXT)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Another application's file before it made its tables: marked as its own, nothing else.
	foreignEmpty := filepath.Join(dir, "foreign-empty.gpkg")
	if db, err = sql.Open("sqlite", foreignEmpty); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA application_id = 0x47504B47"); err != nil { // "GPKG"
		t.Fatal(err)
	}
	db.Close()

	cases := []struct {
		name  string
		make  func(path string) error
		want  string // in the error
		check bool   // the error names `effectfence ledger check`
	}{
		{"text file", func(p string) error { return os.WriteFile(p, []byte("hello, this is my shopping list\n"), 0o600) }, "not a SQLite database", true},
		{"short header", func(p string) error { return os.WriteFile(p, []byte("SQLite format 3\x00\x10\x00"), 0o600) }, "truncated", true},
		{"truncated to half", func(p string) error { return os.WriteFile(p, goodBytes[:len(goodBytes)/2], 0o600) }, "", true},
		{"truncated to one page", func(p string) error { return os.WriteFile(p, goodBytes[:4096], 0o600) }, "", true},
		// Cut inside the last page: SQLite reads the missing bytes as zeros and quick_check
		// passes; a write would extend the file with them.
		{"truncated by one byte", func(p string) error { return os.WriteFile(p, goodBytes[:len(goodBytes)-1], 0o600) }, "is truncated", true},
		{"truncated inside the last page", func(p string) error { return os.WriteFile(p, goodBytes[:len(goodBytes)-1000], 0o600) }, "is truncated", true},
		{"corrupted pages", func(p string) error {
			b := bytes.Clone(goodBytes)
			for i := 2 * 4096; i < len(b); i += 4096 {
				copy(b[i:i+64], bytes.Repeat([]byte{0xA5}, 64))
			}
			return os.WriteFile(p, b, 0o600)
		}, "", true},
		{"foreign SQLite database", func(p string) error {
			b, err := os.ReadFile(foreignSQLite)
			if err != nil {
				return err
			}
			return os.WriteFile(p, b, 0o600)
		}, "another application", true},
		{"foreign SQLite database without tables", func(p string) error {
			b, err := os.ReadFile(foreignEmpty)
			if err != nil {
				return err
			}
			return os.WriteFile(p, b, 0o600)
		}, "another application (application_id 0x47504b47)", true},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }, "is a directory", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			var before [32]byte
			if fi, _ := os.Stat(path); !fi.IsDir() {
				before = fileSum(t, path)
			}
			err := useLedger(path)
			if err == nil {
				t.Fatal("a damaged ledger was used without an error")
			}
			t.Log(err)
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			var fe *sqlite.FileError
			if tc.check && (!errors.As(err, &fe) || !strings.Contains(err.Error(), "effectfence ledger check")) {
				t.Errorf("error %q is not a FileError naming `effectfence ledger check`", err)
			}
			if fi, _ := os.Stat(path); !fi.IsDir() && fileSum(t, path) != before {
				t.Error("opening the damaged file changed it")
			}
		})
	}
	// The good ledger is untouched by all of that and still opens.
	if err := useLedger(good); err != nil {
		t.Fatal(err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 1)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE meta SET value = ? WHERE key = 'schema_version'", sqlite.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	err = useLedger(path)
	if err == nil || !strings.Contains(err.Error(), "newer than this build") || !strings.Contains(err.Error(), "ledger check") {
		t.Fatalf("newer schema: %v", err)
	}
}

func TestFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "effectfence")
	path := filepath.Join(dir, "server.db")
	st := openT(t, path, sqlite.Options{})
	if err := st.Update(ctx, func(tx fence.Tx) error { return tx.Put(&fence.Record{Intent: "x", State: fence.StateInFlight}) }); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600, path + "-wal": 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v; want %v", p, fi.Mode(), want)
		}
	}
}

// DECISIONS-sqlite: "A missing directory is created 0700. An existing directory's mode is
// left alone": a ledger put in a directory its owner shares (0755, 0750) does not take the
// directory from the others.
func TestExistingDirectoryModeLeftAlone(t *testing.T) {
	for _, mode := range []os.FileMode{0o755, 0o750, 0o711} {
		dir := filepath.Join(t.TempDir(), "shared")
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		st := openT(t, filepath.Join(dir, "ledger.db"), sqlite.Options{})
		if err := st.Update(ctx, func(tx fence.Tx) error { return tx.Put(&fence.Record{Intent: "x", State: fence.StateInFlight}) }); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("the ledger's existing directory had mode %v; after the open %v (%v)", mode, fi.Mode().Perm(), err)
		}
		if fi, err := os.Stat(filepath.Join(dir, "ledger.db")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the ledger in it: %v (%v); want 0600", fi.Mode().Perm(), err)
		}
	}
}

// A ledger path may be a link to a file that does not exist yet (a dotfiles setup pointing
// at a synced folder): the file is created 0600 there all the same, not with SQLite's
// default mode (0644 under the usual umask, readable by every user).
func TestFileModesThroughADanglingLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere", "ledger.db")
	if err := os.Mkdir(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "ledger.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	st := openT(t, link, sqlite.Options{})
	if err := st.Update(ctx, func(tx fence.Tx) error { return tx.Put(&fence.Record{Intent: "x", State: fence.StateInFlight}) }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, target + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o600 {
			t.Errorf("%s has mode %v; want %v", p, fi.Mode(), os.FileMode(0o600))
		}
	}
}

// TestCheckInAnUnwritableDirectory: `ledger check` reads a healthy ledger that sits in a
// directory its user cannot write (a copy on read-only media, another user's ledger): at rest
// it has no shared-memory file, which SQLite would need to create there, so Check reads it as
// an immutable file, and reports it healthy. With a write-ahead log beside it (a process did
// not close it), SQLite cannot read it there: on Linux Check reads the file and the log's
// committed frames itself, writing nothing (readFrozen), and reports it healthy, its record in
// the log counted; elsewhere it says it cannot read it here, advising a copy and not (as it
// did for both) to move a healthy ledger aside.
func TestCheckInAnUnwritableDirectory(t *testing.T) {
	if os.Getenv("EFFECTFENCE_TEST_AS_CHILD") == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root, to run the check as a user the directory's permissions apply to")
		}
		runAsNobody(t, "TestCheckInAnUnwritableDirectory", func(base string) []string {
			rest, logged := filepath.Join(base, "rest"), filepath.Join(base, "logged")
			for _, d := range []string{rest, logged} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			closed := openT(t, filepath.Join(rest, "ledger.db"), sqlite.Options{})
			writeOne(t, closed, "rest:1")
			if err := closed.Close(); err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(rest, "ledger.db-lock"))
			open := openT(t, filepath.Join(base, "open.db"), sqlite.Options{})
			writeOne(t, open, "logged:1")
			for _, suffix := range []string{"", "-wal"} { // a copy taken while it was open
				b, err := os.ReadFile(filepath.Join(base, "open.db") + suffix)
				if err != nil || (suffix == "-wal" && len(b) == 0) {
					t.Fatalf("open.db%s: %d bytes, %v", suffix, len(b), err)
				}
				if err := os.WriteFile(filepath.Join(logged, "ledger.db")+suffix, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			paths := []string{base, rest, logged}
			for _, d := range []string{rest, logged} {
				files, _ := filepath.Glob(filepath.Join(d, "*"))
				if len(files) == 0 || slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "-shm") }) {
					t.Fatalf("%s holds %v: want a ledger without its -shm", d, files)
				}
				paths = append(paths, files...)
			}
			for _, d := range []string{rest, logged} {
				if err := os.Chmod(d, 0o500); err != nil {
					t.Fatal(err)
				}
			}
			return paths
		})
		return
	}
	base := os.Getenv("EFFECTFENCE_TEST_DIR")
	rest := filepath.Join(base, "rest", "ledger.db")
	r, err := sqlite.Check(ctx, rest)
	if err != nil || !r.OK || r.Kind != "effectfence ledger" || r.States["done"] != 1 || len(r.Problems) > 0 {
		t.Fatalf("check of a ledger at rest in an unwritable directory: %+v, %v", r, err)
	}
	if _, err := os.Stat(rest + "-shm"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the check left %s-shm: %v", rest, err)
	}
	logged := filepath.Join(base, "logged", "ledger.db")
	r, err = sqlite.Check(ctx, logged)
	if runtime.GOOS == "linux" {
		if err != nil || !r.OK || r.States["done"] != 1 || len(r.Problems) > 0 {
			t.Fatalf("check of a ledger with a log in an unwritable directory: %+v, %v; want it read, its record in the log", r, err)
		}
		if _, err := os.Stat(logged + "-shm"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the check left %s-shm: %v", logged, err)
		}
		return
	}
	if err != nil || r.OK || (r.Kind != "effectfence ledger" && r.Kind != "SQLite database") || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "not writable") || !strings.Contains(r.Problems[0], "no damage") {
		t.Fatalf("check of a ledger with a log in an unwritable directory: %+v, %v", r, err)
	}
	if advice := strings.Join(r.Advice, "\n"); !strings.Contains(advice, "copy") || strings.Contains(advice, "move it aside") {
		t.Fatalf("advice for a ledger that cannot be read here: %q", advice)
	}
}

// writeOne records one fresh call, done, in st.
func writeOne(t *testing.T, st *sqlite.Store, intent string) {
	t.Helper()
	e := fence.New(st, fence.Config{})
	adm, err := e.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
}

// Permission cases must run as a user the kernel checks permissions for: as root the test
// re-runs itself as nobody (uid 65534) in a child process.
func TestUnwritableLocations(t *testing.T) {
	if os.Getenv("EFFECTFENCE_TEST_AS_CHILD") == "" && os.Geteuid() == 0 {
		runAsNobody(t, "TestUnwritableLocations", func(base string) []string {
			setupUnwritable(t, base)
			return []string{base, filepath.Join(base, "locked"), filepath.Join(base, "ro.db")}
		})
		return
	}
	base := os.Getenv("EFFECTFENCE_TEST_DIR")
	if base == "" {
		base = t.TempDir()
		if err := os.Chmod(base, 0o700); err != nil {
			t.Fatal(err)
		}
		setupUnwritable(t, base)
	}
	t.Run("unwritable directory", func(t *testing.T) {
		err := useLedger(filepath.Join(base, "locked", "ledger.db"))
		if err == nil || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), "--ledger") {
			t.Fatalf("ledger in an unwritable directory: %v", err)
		}
	})
	t.Run("directory cannot be created", func(t *testing.T) {
		err := useLedger(filepath.Join(base, "locked", "sub", "ledger.db"))
		if err == nil || !strings.Contains(err.Error(), "cannot create the ledger directory") {
			t.Fatalf("ledger under an uncreatable directory: %v", err)
		}
	})
	t.Run("read-only file", func(t *testing.T) {
		path := filepath.Join(base, "ro.db")
		before := fileSum(t, path)
		err := useLedger(path)
		if err == nil || !strings.Contains(err.Error(), "not writable") || !strings.Contains(err.Error(), "ledger check") {
			t.Fatalf("read-only ledger: %v", err)
		}
		if fileSum(t, path) != before {
			t.Fatal("the read-only ledger changed")
		}
	})
}

// setupUnwritable makes base/locked (no write permission) and base/ro.db (a ledger, read-only).
func setupUnwritable(t *testing.T, base string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(base, "locked"), 0o500); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(base, "ro.db")
	seedLedger(t, ro, 5)
	if err := os.Chmod(ro, 0o400); err != nil {
		t.Fatal(err)
	}
}

// runAsNobody runs test name again in a child process as the user nobody, with
// EFFECTFENCE_TEST_DIR naming a directory that setup filled (as root) and whose paths it
// returns are handed to nobody.
func runAsNobody(t *testing.T, name string, setup func(base string) []string) {
	base, err := os.MkdirTemp("", "effectfence-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o700) // fixtures may be directories nobody could write
			}
			return nil
		})
		os.RemoveAll(base)
	})
	// Hand the fixtures to nobody, keeping the modes that make them unwritable.
	for _, p := range setup(base) {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary lives in a directory only root can search: run a copy nobody can reach.
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(base, "test.bin")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_AS_CHILD=1", "EFFECTFENCE_TEST_DIR="+base, "HOME="+base)
	cmd.Dir = base
	asNobody(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+name)) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	t.Logf("as nobody:\n%s", out)
}

// A record whose body was damaged inside an otherwise healthy SQLite file is reported as a
// FileError naming `effectfence ledger check`, never decoded into a zero record.
func TestDamagedRecordBody(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 3)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for intent, body := range map[string]string{"seed:0001": `{"intent":"seed:0001","state":`, "seed:0002": `{"intent":"someone-else","state":"done"}`} {
		if _, err := db.Exec("UPDATE records SET body = ? WHERE intent = ?", []byte(body), intent); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	st := openT(t, path, sqlite.Options{})
	for _, intent := range []string{"seed:0001", "seed:0002"} {
		err := st.View(ctx, func(tx fence.Tx) error {
			_, err := tx.Get(intent)
			return err
		})
		var fe *sqlite.FileError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "ledger check") {
			t.Errorf("Get(%s) of a damaged body = %v", intent, err)
		}
	}
}

// Whatever bytes the ledger file holds, opening and using it returns an error or works; it
// never panics. The seeds run as part of the normal test run.
func FuzzOpenLedgerFile(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good.db")
	st, err := sqlite.Open(ctx, good, sqlite.Options{})
	if err != nil {
		f.Fatal(err)
	}
	eng := fence.New(st, fence.Config{})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "x", Tool: "t"})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`1`)); err != nil {
		f.Fatal(err)
	}
	eng.Close()
	b, err := os.ReadFile(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{})
	f.Add([]byte("SQLite format 3\x00"))
	f.Add(b[:100])
	f.Add(b[:4096])
	f.Add(b)
	flipped := bytes.Clone(b)
	flipped[4096*2+100] ^= 0xff
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, content []byte) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		_ = useLedger(path)
	})
}

// A ledger that lost its token row refuses to hand out a token (a FileError), and hands out
// the next one after the row is back.
func TestMissingTokenRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 1)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var token int64
	if err := db.QueryRow("SELECT value FROM meta WHERE key = 'token'").Scan(&token); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM meta WHERE key = 'token'"); err != nil {
		t.Fatal(err)
	}
	st := openT(t, path, sqlite.Options{})
	next := func() (uint64, error) {
		var n uint64
		err := st.Update(ctx, func(tx fence.Tx) (err error) { n, err = tx.NextToken(); return err })
		return n, err
	}
	var fe *sqlite.FileError
	if _, err := next(); !errors.As(err, &fe) || !strings.Contains(err.Error(), `"token"`) {
		t.Fatalf("NextToken without its row = %v", err)
	}
	if _, err := db.Exec("INSERT INTO meta(key, value) VALUES ('token', ?)", token); err != nil {
		t.Fatal(err)
	}
	if n, err := next(); err != nil || n != uint64(token)+1 {
		t.Fatalf("NextToken = %d, %v; want %d", n, err, token+1)
	}
}

// TestQueueLockFileIsNoLedger: a ledger's writers' queue lock file (<ledger>-lock, empty) is
// refused as a ledger path, directly or through a link, before anything is created beside it:
// in a process that also had the ledger open, closing that store's descriptor of the lock file
// would drop every SQLite lock the process held on it, and another process could then
// checkpoint and delete a -wal still in use. A file named -lock that is not a ledger's queue
// (no ledger beside it, or a ledger itself, made before the other) opens as usual.
func TestQueueLockFileIsNoLedger(t *testing.T) {
	dir := t.TempDir()
	ledger := filepath.Join(dir, "x.db")
	openT(t, ledger, sqlite.Options{})
	lock := ledger + "-lock"
	if fi, err := os.Stat(lock); err != nil || fi.Size() != 0 {
		t.Fatalf("the queue's lock file: %v, %v", fi, err)
	}
	alias := filepath.Join(dir, "alias.db")
	if err := os.Symlink(lock, alias); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{lock, alias} {
		for _, ro := range []bool{false, true} {
			st, err := sqlite.Open(ctx, p, sqlite.Options{ReadOnly: ro})
			if err == nil {
				st.Close()
				t.Fatalf("open %s (read-only %v) as a ledger: no error", p, ro)
			}
			if !strings.Contains(err.Error(), "queue lock file") || !strings.Contains(err.Error(), ledger) || !strings.Contains(err.Error(), "--ledger") {
				t.Fatalf("open %s (read-only %v): %v", p, ro, err)
			}
		}
	}
	if fi, err := os.Stat(lock); err != nil || fi.Size() != 0 {
		t.Fatalf("the lock file after the refusals: %v, %v", fi, err)
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal", "-lock"} {
		if _, err := os.Lstat(lock + suffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused open left %s%s: %v", lock, suffix, err)
		}
	}

	// No ledger beside it: a ledger of its own.
	writeOne(t, openT(t, filepath.Join(dir, "y-lock"), sqlite.Options{}), "y:1")
	// A ledger named z.db-lock made before z.db: z.db's queue leaves it alone, and it reopens.
	zl := filepath.Join(dir, "z.db-lock")
	first := openT(t, zl, sqlite.Options{})
	writeOne(t, first, "z-lock:1")
	first.Close()
	openT(t, filepath.Join(dir, "z.db"), sqlite.Options{})
	writeOne(t, openT(t, zl, sqlite.Options{}), "z-lock:2")
}

// TestCheckPathsWithURIMarks: Check reads the file its path names when the path holds what a
// SQLite URI gives a meaning to ('?', '#', '%'), as Open does (it passed the path into its URI
// unescaped, and read another file or none).
func TestCheckPathsWithURIMarks(t *testing.T) {
	for _, name := range []string{"led#ger.db", "led?mode=rwc.db", "led%3Fger.db"} {
		path := filepath.Join(t.TempDir(), name)
		st := openT(t, path, sqlite.Options{})
		writeOne(t, st, "uri:1")
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := sqlite.Check(ctx, path)
		if err != nil || !r.OK || r.Kind != "effectfence ledger" || r.States["done"] != 1 {
			t.Fatalf("check of %s: %+v, %v", name, r, err)
		}
	}
}

// TestCheckFindsDamagedRecords edits record bodies with SQL as a person with the sqlite3
// shell (or a torn file extended with zeros) would: every command that reads such a record
// fails with an error sending the operator to `effectfence ledger check`, so Check must name
// each damaged record and not report the ledger OK (its pages are sound: integrity_check
// passes).
func TestCheckFindsDamagedRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 6)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE records SET body = CAST('{"intent":"seed:0001","state":' AS BLOB) WHERE intent = 'seed:0001'`,
		`UPDATE records SET body = CAST('{"intent":"someone-else","state":"done"}' AS BLOB) WHERE intent = 'seed:0002'`,
		`UPDATE records SET state = 'unknown' WHERE intent = 'seed:0003'`,
		// The sweep drops records by this column.
		`UPDATE records SET expires_at = 1 WHERE intent = 'seed:0004'`,
		`UPDATE records SET cert_hash = 'abc' WHERE intent = 'seed:0005'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	rep, err := sqlite.Check(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.Problems)
	if rep.OK {
		t.Fatalf("Check reports a ledger with damaged records OK: %+v", rep)
	}
	for _, want := range []string{`"seed:0001" is unreadable`, `"seed:0002" names intent "someone-else"`, `"seed:0003" says state "done" but is filed as "unknown"`,
		`"seed:0004" is filed with another expiry`, `"seed:0005" is filed with another cert hash`} {
		if !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem says %s: %q", want, rep.Problems)
		}
	}
	if slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.Contains(p, "seed:0000") }) {
		t.Errorf("the sound record seed:0000 is reported: %q", rep.Problems)
	}
}

// TestScanGoesOnPastUnreadableRecords damages record bodies with SQL, at the edges of Scan's
// pages among 600 records: a Scan that asks to be told of unreadable records (the operator's
// views, Recover) gets every other record, in order, and each damaged one by intent, in a
// read and in a write transaction; a Scan that does not ask ends at the first with its error;
// Get of a damaged record fails, with advice whose statement removes it.
func TestScanGoesOnPastUnreadableRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	name := func(i int) string { return fmt.Sprintf("r:%04d", i) }
	err = st.Update(ctx, func(tx fence.Tx) error {
		for i := range n {
			if err := tx.Put(&fence.Record{Intent: name(i), State: fence.StateFailed, Tool: "t", Token: uint64(i + 1)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	damaged := []int{0, 255, 256, 257, 511, 512, n - 1}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for k, i := range damaged {
		body := `{"intent":"` + name(i) + `","state":`
		if k%2 == 1 {
			body = `{"intent":"someone-else","state":"failed"}`
		}
		if _, err := db.Exec("UPDATE records SET body = CAST(? AS BLOB) WHERE intent = ?", body, name(i)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	st, err = sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var want, wantBad []string
	for i := range n {
		if slices.Contains(damaged, i) {
			wantBad = append(wantBad, name(i))
		} else {
			want = append(want, name(i))
		}
	}
	for _, txn := range []struct {
		name string
		run  func(context.Context, func(fence.Tx) error) error
	}{{"View", st.View}, {"Update", st.Update}} {
		var got, bad []string
		err := txn.run(ctx, func(tx fence.Tx) error {
			got, bad = nil, nil
			f := fence.Filter{States: []fence.State{fence.StateFailed}, Unreadable: func(u *fence.UnreadableError) {
				var fe *sqlite.FileError
				if !errors.As(u, &fe) {
					t.Errorf("%s: unreadable %s is not a FileError: %v", txn.name, u.Intent, u)
				}
				bad = append(bad, u.Intent)
			}}
			return tx.Scan(f, func(r *fence.Record) bool { got = append(got, r.Intent); return true })
		})
		if err != nil {
			t.Fatalf("%s: Scan told of unreadable records failed: %v", txn.name, err)
		}
		if !slices.Equal(got, want) || !slices.Equal(bad, wantBad) {
			t.Fatalf("%s: Scan gave %d records (want %d) and unreadable %q (want %q)", txn.name, len(got), len(want), bad, wantBad)
		}
	}
	err = st.View(ctx, func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(*fence.Record) bool { return true })
	})
	var u *fence.UnreadableError
	if !errors.As(err, &u) || u.Intent != name(0) {
		t.Fatalf("a Scan not told of unreadable records = %v; want the unreadable %s", err, name(0))
	}
	var rec *fence.Record
	err = st.View(ctx, func(tx fence.Tx) (err error) { rec, err = tx.Get(name(256)); return err })
	if !errors.As(err, &u) || u.Intent != name(256) || rec != nil {
		t.Fatalf("Get of a damaged record = %v, %v", rec, err)
	}
	// The advice names the statement that removes the record once its effect is known.
	stmt := err.Error()[strings.Index(err.Error(), `"DELETE FROM`)+1:]
	stmt = stmt[:strings.Index(stmt, `"`)]
	st.Close()
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := db.Exec(stmt); err != nil {
		t.Fatalf("the advice's %q: %v", stmt, err)
	} else if k, _ := res.RowsAffected(); k != 1 {
		t.Fatalf("the advice's %q removed %d rows", stmt, k)
	}
	db.Close()
}

// TestRemoveAdviceIsSafeToPaste: the error of an unreadable record says which sqlite3 command
// removes it. An intent is what an agent wrote: the command, run by a POSIX shell, must be
// exactly two words (the ledger, the statement), run nothing the intent holds, and remove
// that record alone.
func TestRemoveAdviceIsSafeToPaste(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "led ger$(touch PWNED).db")
	intents := []string{"plain:1", "it's", "a$(touch PWNED)", "x`touch PWNED`", `back\slash "quoted"`, "a!b*c", "'; DROP TABLE records; --"}
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(ctx, func(tx fence.Tx) error {
		for _, intent := range append(intents, "bystander") {
			if err := tx.Put(&fence.Record{Intent: intent, State: fence.StateFailed, Tool: "t"}); err != nil {
				return err
			}
		}
		return nil
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE records SET body = CAST('{' AS BLOB) WHERE intent <> 'bystander'"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// What each read of a damaged record says, the ledger open (and nothing else holding it).
	said := map[string]error{}
	if st, err = sqlite.Open(ctx, path, sqlite.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, intent := range intents {
		said[intent] = st.View(ctx, func(tx fence.Tx) error { _, err := tx.Get(intent); return err })
	}
	st.Close()
	if db, err = sql.Open("sqlite", path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, intent := range intents {
		err := said[intent]
		msg := fmt.Sprint(err)
		const before, after = "remove the record (", ") and the next attempt"
		i, j := strings.Index(msg, before), strings.LastIndex(msg, after)
		if i < 0 || j < i {
			t.Fatalf("%q: no remove command in %v", intent, err)
		}
		cmd := strings.TrimPrefix(msg[i+len(before):j], "sqlite3 ")
		sh := exec.Command("sh", "-c", `printf '%s\0' `+cmd)
		sh.Dir = dir
		out, err := sh.Output()
		if err != nil {
			t.Fatalf("%q: sh %s: %v", intent, cmd, err)
		}
		words := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
			t.Fatalf("%q: the pasted command ran what the intent holds: %s", intent, cmd)
		}
		if len(words) != 2 || words[0] != path {
			t.Fatalf("%q: the command %s is the words %q", intent, cmd, words)
		}
		res, err := db.Exec(words[1])
		if err != nil {
			t.Fatalf("%q: %s: %v", intent, words[1], err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("%q: %s removed %d records", intent, words[1], n)
		}
	}
	var left []string
	rows, err := db.Query("SELECT intent FROM records")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		left = append(left, s)
	}
	rows.Close()
	if !slices.Equal(left, []string{"bystander"}) {
		t.Fatalf("left %q", left)
	}
}

// TestEmptiedLedgerIsRefused: a ledger file emptied after use (truncated to 0 bytes by a tool,
// a copy cut short, `: > ledger.db`) is not a new ledger: taken for one, it would forget every
// outcome and each done call would run again. Its writers' queue file beside it shows that a
// ledger was there, so opening it, to write or to look, is refused and the file is left as it
// is. Removing the queue file says "a new ledger here on purpose"; a ledger removed whole
// (rm) is made afresh at the next open, its old queue file notwithstanding.
func TestEmptiedLedgerIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	seedLedger(t, path, 3)
	if _, err := os.Stat(path + "-lock"); err != nil {
		t.Fatalf("no queue file beside a used ledger: %v", err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		st, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: ro})
		if err == nil {
			st.Close()
			t.Fatalf("read-only %v: an emptied ledger was opened as a new one; every done call would run again", ro)
		}
		var fe *sqlite.FileError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "was emptied") || !strings.Contains(err.Error(), "remove "+path+"-lock") {
			t.Fatalf("read-only %v: %v; want a FileError saying the file was emptied and how to start afresh", ro, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
			t.Fatalf("the refused file was changed: %v %v", fi, err)
		}
	}
	r, err := sqlite.Check(ctx, path)
	if err != nil || r.OK || r.Kind != "emptied ledger" || len(r.Advice) == 0 || !strings.Contains(r.Advice[0], "remove "+path+"-lock") {
		t.Fatalf("ledger check of an emptied ledger: %+v %v; want a problem and the ways out", r, err)
	}
	// Removed on purpose: a new ledger.
	if err := os.Remove(path + "-lock"); err != nil {
		t.Fatal(err)
	}
	st := openT(t, path, sqlite.Options{})
	st.Close()
	// A ledger removed whole, its queue file left: made afresh.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-lock"); err != nil {
		t.Fatalf("the new ledger has no queue file: %v", err)
	}
	st = openT(t, path, sqlite.Options{})
	st.Close()
	// A new empty file (touch, mktemp) with no queue file beside it becomes a ledger.
	other := filepath.Join(dir, "made-empty.db")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	st = openT(t, other, sqlite.Options{})
	st.Close()
}

// TestNewLedgerOpenedAtOnceIsNotTakenForEmptied: processes that open a new ledger at the same
// moment see its file empty while one of them makes it; none may take it for an emptied
// ledger (TestEmptiedLedgerIsRefused), also where a removed ledger's queue file was left
// behind. Six processes at once, five times, the ledger removed whole between rounds.
func TestNewLedgerOpenedAtOnceIsNotTakenForEmptied(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	const procs, rounds = 6, 5
	for round := range rounds {
		var cmds []*exec.Cmd
		outs := make([]*bytes.Buffer, procs)
		for p := range procs {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_MIGRATOR="+path)
			outs[p] = new(bytes.Buffer)
			cmd.Stdout, cmd.Stderr = outs[p], outs[p]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, cmd)
		}
		for p, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("round %d, process %d of %d opening a new ledger at once: %v\n%s", round, p, procs, err, outs[p])
			}
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
}
