//go:build unix

package wrap_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docs/identity.md, "What the scope cannot see": the roots the client gives the server (MCP's
// roots/list, asked by the server after initialize and again after
// notifications/roots/list_changed) are not in the scope. The real filesystem server acts on
// the client's roots (they replace the directories of its command line) and resolves a
// relative path against them: two clients whose roots differ, through one configuration (the
// same command, directory and environment; two IDE windows of one user-level MCP config, say),
// are one scope, and the second client's identical write_file is answered with the first's
// receipt and does not run in its own root.
func TestScopeCannotSeeTheClientsRoots(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-filesystem")
	r := newRig(t)
	r.workDir = r.dir
	r.childCmdOverride = []string{bin, r.dir}
	args, _ := json.Marshal(map[string]string{"path": "note.txt", "content": "written once"})
	for i, project := range []string{"project-a", "project-b"} {
		root := filepath.Join(r.dir, project)
		if err := os.Mkdir(root, 0o700); err != nil {
			t.Fatal(err)
		}
		roots, _ := json.Marshal(map[string]any{"roots": []map[string]string{{"uri": "file://" + root, "name": project}}})
		r.onRequest = func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
			if method != "roots/list" {
				return json.RawMessage(`{}`), nil
			}
			return roots, nil
		}
		w := r.wrap()
		// The server asks for the roots once initialized; list_allowed_directories (read-only,
		// passed through) shows when it has them.
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(call(t, w.Session, "list_allowed_directories", `{}`).text(), project) {
			if time.Now().After(deadline) {
				t.Fatalf("the server never took the client's root %s:\n%s", root, w.log.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		x := call(t, w.Session, "write_file", string(args))
		w.Close()
		_, err := os.Stat(filepath.Join(root, "note.txt"))
		if x.IsError || x.replayed() != (i == 1) || (err == nil) != (i == 0) {
			t.Fatalf("%s: %q (isError %v, replayed %v), note.txt there: %v; want the first project written and the second answered with its receipt, unwritten: the client's roots are not in the scope", project, x.text(), x.IsError, x.replayed(), err == nil)
		}
	}
}
