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
// Two wraps sharing one ledger each run the identical call on their own data.
func TestScopeSeparatesMemoryServersOnOneLedger(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-memory")
	shared := filepath.Join(t.TempDir(), "shared.db")
	args := `{"entities":[{"name":"order-123","entityType":"order","observations":["charged 49.00"]}]}`
	var files []string
	for i := range 2 {
		r := newRig(t)
		r.ledger = shared
		r.childCmdOverride = []string{bin}
		w := r.wrap()
		if x := call(t, w.Session, "create_entities", args); x.IsError || x.replayed() {
			t.Fatalf("wrap %d: the call must run on its own server: %+v", i, x)
		}
		// Within one scope the duplicate is still replayed.
		if x := call(t, w.Session, "create_entities", args); !x.replayed() {
			t.Fatalf("wrap %d: a duplicate ran again: %+v", i, x)
		}
		w.Close()
		files = append(files, filepath.Join(r.dir, "memory.jsonl"))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "order-123") {
			t.Fatalf("%s does not hold the entity (the call was answered with the other server's receipt): %s %v", f, b, err)
		}
	}
}

// Issue 12 item 2: `mcp-server-filesystem .` started from two directories is two servers.
func TestScopeSeparatesFilesystemServersByDirectory(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-filesystem")
	shared := filepath.Join(t.TempDir(), "shared.db")
	for i := range 2 {
		r := newRig(t)
		r.ledger = shared
		r.workDir = t.TempDir()
		r.childCmdOverride = []string{bin, "."}
		w := r.wrap()
		path := filepath.Join(r.workDir, "note.txt")
		args, _ := json.Marshal(map[string]string{"path": "note.txt", "content": "written once"})
		x := call(t, w.Session, "write_file", string(args))
		if x.IsError || x.replayed() {
			t.Fatalf("wrap %d in %s: %+v", i, r.workDir, x)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("wrap %d: %s not written: %v (%s)", i, path, err, x.text())
		}
		w.Close()
	}
}
