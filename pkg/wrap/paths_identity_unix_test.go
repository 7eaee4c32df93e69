//go:build unix

package wrap_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// docs/identity.md, "Canonical form": arguments are compared as JSON values, never as what
// they name. Spellings of one path (relative, with "./" or "..", through a link, absolute)
// name one file to the real filesystem server and are distinct calls to wrap: each runs, and
// edit_file, which appends here, appends once per spelling. A retry of a spelling sends the same
// bytes and is answered with its receipt, not run.
func TestPathSpellingsAreDistinctCalls(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-filesystem")
	r := newRig(t)
	data := filepath.Join(r.dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".", filepath.Join(data, "here")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(data, "f.txt")
	if err := os.WriteFile(file, []byte("count:"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.workDir = r.dir
	r.childCmdOverride = []string{bin, data}
	r.init = json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test-agent","version":"1"}}`) // no roots: the command line's directory holds
	w := r.wrap()
	edit := func(path string) result {
		args, _ := json.Marshal(map[string]any{"path": path, "edits": []map[string]string{{"oldText": "count:", "newText": "count:I"}}})
		return call(t, w.Session, "edit_file", string(args))
	}
	spellings := []string{"f.txt", "./f.txt", "sub/../f.txt", "here/f.txt", file}
	for _, p := range spellings {
		if x := edit(p); x.IsError || x.replayed() {
			t.Fatalf("edit_file %q: %q (isError %v, replayed %v); want it run: another spelling is another call", p, x.text(), x.IsError, x.replayed())
		}
	}
	if x := edit("./f.txt"); x.IsError || !x.replayed() {
		t.Fatalf("a retry of ./f.txt: %q (isError %v, replayed %v); want its receipt", x.text(), x.IsError, x.replayed())
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := "count:IIIII"; string(got) != want {
		t.Fatalf("f.txt holds %q, want %q: one edit per spelling, none for the retry", got, want)
	}
}
