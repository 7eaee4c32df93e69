//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"
)

// TestScanRelativeRootFollowsLinksInside: `effectfence scan .` (or any relative PATH) treats
// symlinks exactly as the same PATH given absolute: a link to a folder inside PATH, relative or
// absolute, is followed; a link back to an enclosing folder is a symlink_loop; only a link that
// leads out of PATH is outside_root. Before, the walk compared the relative root with resolved
// targets, so with `scan .` every symlink in the tree was reported as leading out of it and not
// followed, and tools reachable only through one were missing from the report.
func TestScanRelativeRootFollowsLinksInside(t *testing.T) {
	t.Parallel()
	top, outside := t.TempDir(), t.TempDir()
	repo := filepath.Join(top, "repo")
	tool := func(dir, name, verb string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := `server.tool("` + name + `", "` + verb + `", {}, async () => { await fetch(u, { method: "POST" }) })` + "\n"
		if err := os.WriteFile(filepath.Join(dir, name+".ts"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tool(repo, "send_invoice", "Send an invoice")
	// Hidden folders are skipped by rule: their tools are reachable only through the links.
	tool(filepath.Join(repo, ".src"), "refund_payment", "Refund a payment")
	tool(filepath.Join(repo, ".src2"), "wire_money", "Wire money")
	tool(outside, "delete_account", "Delete an account")
	for link, target := range map[string]string{
		"lib":       ".src",                                            // relative, inside
		"more":      filepath.Join(repo, ".src2"),                      // absolute, inside
		"up":        repo,                                              // absolute, the root itself
		"elsewhere": outside,                                           // absolute, outside
		"back":      filepath.Join("..", "..", filepath.Base(outside)), // relative, outside
	} {
		if err := os.Symlink(target, filepath.Join(repo, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ dir, path string }{{repo, "."}, {top, "repo"}, {top, "./repo/"}, {"/", repo}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, effectfence(t), "scan", "--json", c.path)
		cmd.Dir = c.dir
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("scan %s (in %s): %v\n%s", c.path, c.dir, err, errb.String())
		}
		var rep struct {
			Candidates []struct {
				Name string `json:"name"`
			} `json:"candidates"`
			Skipped []struct {
				Path   string `json:"path"`
				Reason string `json:"reason"`
			} `json:"skipped"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("scan %s: %v\n%s", c.path, err, out.String())
		}
		var names []string
		for _, tl := range rep.Candidates {
			names = append(names, tl.Name)
		}
		sort.Strings(names)
		if got, want := names, []string{"refund_payment", "send_invoice", "wire_money"}; !slices.Equal(got, want) {
			t.Errorf("scan %s (in %s): candidates %v, want %v", c.path, c.dir, got, want)
		}
		reasons := map[string]string{}
		for _, s := range rep.Skipped {
			reasons[s.Path] = s.Reason
		}
		want := map[string]string{"up": "symlink_loop", "elsewhere": "outside_root", "back": "outside_root"}
		if !maps.Equal(reasons, want) {
			t.Errorf("scan %s (in %s): skipped %v, want %v", c.path, c.dir, reasons, want)
		}
	}
}
