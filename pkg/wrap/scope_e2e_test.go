package wrap_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func peer(t *testing.T, name string) string {
	bin, _ := filepath.Abs("../../.peers/node_modules/.bin/" + name)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("skipping: %s is not installed; run scripts/install-peers", name)
	}
	return bin
}

// Issue 12 item 2: the same server command with another MEMORY_FILE_PATH is another server.
// Two wraps sharing one ledger, a SQLite file or a PostgreSQL schema, each run the identical
// call on their own data. The two configurations differ in that variable alone (same
// directory, every other variable the same), so the test holds the variable itself to count.
func TestScopeSeparatesMemoryServersOnOneLedger(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-memory")
	for name, ledger := range map[string]func(*testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "shared.db") },
		"postgres": func(t *testing.T) string { _, u := cutLedger(t); return u },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			memoryServersOnOneLedger(t, bin, ledger(t))
		})
	}
}

func memoryServersOnOneLedger(t *testing.T, bin, shared string) {
	args := `{"entities":[{"name":"order-123","entityType":"order","observations":["charged 49.00"]}]}`
	r := newRig(t)
	r.ledger = shared
	r.childCmdOverride = []string{bin}
	var files []string
	for i, f := range []string{"a.jsonl", "b.jsonl"} {
		file := filepath.Join(r.dir, f)
		r.extraEnv = []string{"MEMORY_FILE_PATH=" + file} // after the rig's own: the one the server sees
		w := r.wrap()
		if x := call(t, w.Session, "create_entities", args); x.IsError || x.replayed() {
			t.Fatalf("wrap %d: the call must run on its own server: %+v", i, x)
		}
		// Within one scope the duplicate is still replayed.
		if x := call(t, w.Session, "create_entities", args); !x.replayed() {
			t.Fatalf("wrap %d: a duplicate ran again: %+v", i, x)
		}
		w.Close()
		files = append(files, file)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "order-123") {
			t.Fatalf("%s does not hold the entity (the call was answered with the other server's receipt): %s %v", f, b, err)
		}
	}
}

// Issue 12 item 2: `mcp-server-filesystem .` started from two directories is two servers. The
// two configurations differ in the directory alone (the same environment).
func TestScopeSeparatesFilesystemServersByDirectory(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-filesystem")
	r := newRig(t)
	r.ledger = filepath.Join(t.TempDir(), "shared.db")
	r.childCmdOverride = []string{bin, "."}
	for i := range 2 {
		r.workDir = t.TempDir()
		w := r.wrap()
		path := filepath.Join(r.workDir, "note.txt")
		args, _ := json.Marshal(map[string]string{"path": "note.txt", "content": "written once"})
		x := call(t, w.Session, "write_file", string(args))
		if x.IsError || x.replayed() {
			t.Fatalf("wrap %d in %s: %q (isError %v, replayed %v); want it run on its own directory", i, r.workDir, x.text(), x.IsError, x.replayed())
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("wrap %d: %s not written: %v (%s)", i, path, err, x.text())
		}
		w.Close()
	}
}

// docs/identity.md: `--scope NAME` replaces the derived scope, so a fleet whose wrap processes
// run in different directories and environments shares receipts; without it they are two
// servers. Two real wrap processes in two directories (and with two environments: each rig's
// server writes its own effects file) on one ledger, a SQLite file and a PostgreSQL schema.
func TestScopeNameSharesReceiptsAcrossDirectories(t *testing.T) {
	t.Parallel()
	ledgers := map[string]func(*testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "shared.db") },
		"postgres": func(t *testing.T) string { _, u := cutLedger(t); return u },
	}
	for name, ledger := range ledgers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			shared := ledger(t)
			run := func(args string, flags ...string) (result, *rig) {
				t.Helper()
				r := newRig(t)
				r.ledger = shared
				r.workDir = t.TempDir()
				w := r.wrap(flags...)
				defer w.Close()
				return call(t, w.Session, "charge", args), r
			}
			// Without a name: two scopes, each call runs on its own server.
			for i := range 2 {
				if x, r := run(`{"amount":41}`); x.IsError || x.replayed() || r.effectCount() != 1 {
					t.Fatalf("derived scope, wrap %d: %q (replayed %v), %d effects; want the call run", i, x.text(), x.replayed(), r.effectCount())
				}
			}
			// With one name: one scope; the second directory's duplicate is replayed, not run.
			first, r1 := run(`{"amount":42}`, "--scope", "fleet-1")
			if first.IsError || first.replayed() || r1.effectCount() != 1 {
				t.Fatalf("--scope, first wrap: %q (replayed %v), %d effects", first.text(), first.replayed(), r1.effectCount())
			}
			second, r2 := run(`{"amount":42}`, "--scope", "fleet-1")
			if !second.replayed() || r2.effectCount() != 0 || second.text() != first.text() {
				t.Fatalf("--scope, second wrap in another directory: %q (replayed %v), %d effects; want the first one's result replayed", second.text(), second.replayed(), r2.effectCount())
			}
			// Another name is another server.
			if x, r := run(`{"amount":42}`, "--scope", "fleet-2"); x.replayed() || r.effectCount() != 1 {
				t.Fatalf("--scope fleet-2: %q (replayed %v), %d effects; want the call run", x.text(), x.replayed(), r.effectCount())
			}
		})
	}
}
