//go:build unix

package wrap_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// docs/identity.md, "What the scope cannot see": a path in the command line (or in an
// environment value) is in the scope as written. Only the working directory is resolved to
// its real path; wrap cannot know which arguments are paths. A deploy's `current` link named
// in the argv and pointed at a new release keeps the scope: the same call on the new release
// is answered with the old release's receipt and does not run there. The real filesystem
// server, given `current` as its allowed directory.
func TestScopeCannotSeeALinkInTheCommand(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-filesystem")
	r := newRig(t)
	r.workDir = r.dir
	r.childCmdOverride = []string{bin, "current"}
	link := filepath.Join(r.dir, "current")
	args, _ := json.Marshal(map[string]string{"path": "note.txt", "content": "written once"})
	for i, release := range []string{"release-1", "release-2"} {
		dir := filepath.Join(r.dir, release)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(link)
		if err := os.Symlink(release, link); err != nil {
			t.Fatal(err)
		}
		w := r.wrap()
		x := call(t, w.Session, "write_file", string(args))
		w.Close()
		_, err := os.Stat(filepath.Join(dir, "note.txt"))
		if x.IsError || x.replayed() != (i == 1) || (err == nil) != (i == 0) {
			t.Fatalf("%s: %q (isError %v, replayed %v), note.txt there: %v; want the first release written and the second answered with its receipt, unwritten: the link in the argv is not resolved", release, x.text(), x.IsError, x.replayed(), err == nil)
		}
	}
}
