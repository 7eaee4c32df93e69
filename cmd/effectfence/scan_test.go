package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func runScan(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"effectfence", "scan"}, args...), streams{strings.NewReader(""), &out, &errb})
	return code, out.String(), errb.String()
}

const traps = "../../pkg/scan/testdata/traps/ts"

func TestScanExitCodes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "server.ts")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"missing path", []string{filepath.Join(t.TempDir(), "nope")}, exitUsage, "must be an existing directory"},
		{"file, not a directory", []string{file}, exitUsage, "not a directory"},
		{"no path", nil, exitUsage, "exactly one PATH"},
		{"two formats", []string{"--json", "--sarif", traps}, exitUsage, "one of --json and --sarif"},
		{"empty directory", []string{t.TempDir()}, exitOK, ""},
		{"candidates found", []string{traps}, exitOK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runScan(t, c.args...)
			if code != c.code || !strings.Contains(errs, c.err) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q), stdout %q", code, c.code, errs, c.err, out)
			}
			if c.code == exitOK && !strings.Contains(out, "What a source scan cannot see") {
				t.Errorf("report lacks the cannot-see list:\n%s", out)
			}
		})
	}
}

func TestScanFormats(t *testing.T) {
	code, out, _ := runScan(t, "--json", traps)
	var rep struct {
		Candidates []struct {
			Name  string `json:"name"`
			Money bool   `json:"money"`
		} `json:"candidates"`
		CannotSee []string `json:"cannot_see"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Candidates) != 3 || len(rep.CannotSee) == 0 {
		t.Fatalf("--json: exit %d, %d candidates, output %.200q", code, len(rep.Candidates), out)
	}
	code, out, _ = runScan(t, "--sarif", traps)
	var log struct {
		Version string `json:"version"`
		Runs    []struct {
			Results []json.RawMessage `json:"results"`
		} `json:"runs"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &log) != nil || log.Version != "2.1.0" || len(log.Runs) != 1 || len(log.Runs[0].Results) != 3 {
		t.Fatalf("--sarif: exit %d, output %.200q", code, out)
	}
	_, out, _ = runScan(t, traps)
	if strings.Contains(out, "\x1b[") {
		t.Errorf("colour codes written to a non-terminal")
	}
}

func TestColourFor(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	t.Setenv("NO_COLOR", "1")
	if colourFor(w) {
		t.Error("colour chosen with NO_COLOR set")
	}
	os.Unsetenv("NO_COLOR")
	if colourFor(w) || colourFor(&bytes.Buffer{}) {
		t.Error("colour chosen for a pipe or a buffer")
	}
}

func TestScanRunUsage(t *testing.T) {
	code, _, errs := runScan(t, traps, "--run")
	if code != exitUsage || !strings.Contains(errs, "needs the server command") {
		t.Fatalf("--run without a command: exit %d, %q", code, errs)
	}
	code, _, errs = runScan(t, traps, "extra")
	if code != exitUsage || !strings.Contains(errs, "exactly one PATH") {
		t.Fatalf("a second argument without --run: exit %d, %q", code, errs)
	}
	code, _, errs = runScan(t, "--run", traps, "--", "/nonexistent/mcp-server")
	if code == exitOK || !strings.Contains(errs, "scan --run") {
		t.Fatalf("--run with a server that cannot start: exit %d, %q", code, errs)
	}
}

// --run against the real server-memory package (scripts/install-peers): all three formats
// carry what the running server published.
func TestScanRunRealServer(t *testing.T) {
	pkg := filepath.Join("..", "..", ".peers", "node_modules", "@modelcontextprotocol", "server-memory", "dist")
	if _, err := os.Stat(pkg); err != nil {
		t.Skip("npm peers not installed (.peers missing); run scripts/install-peers")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	server := []string{"--", node, filepath.Join(pkg, "index.js")}
	t.Setenv("MEMORY_FILE_PATH", filepath.Join(t.TempDir(), "memory.jsonl"))

	code, out, errs := runScan(t, append([]string{"--json", "--run", pkg}, server...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Run struct {
			Published []struct {
				Name string `json:"name"`
			} `json:"published"`
			NotInCode []string `json:"published_not_found_in_code"`
		} `json:"run"`
		Candidates []struct {
			Name      string `json:"name"`
			Published *bool  `json:"published"`
		} `json:"candidates"`
		Notes []any `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Run.Published) != 9 || len(rep.Run.NotInCode) != 0 || len(rep.Candidates) != 6 {
		t.Fatalf("published %d, not in code %v, candidates %d", len(rep.Run.Published), rep.Run.NotInCode, len(rep.Candidates))
	}
	for _, c := range rep.Candidates {
		if c.Published == nil || !*c.Published {
			t.Errorf("%s not marked published", c.Name)
		}
	}
	if rep.Notes == nil {
		t.Error("notes missing from --json")
	}

	code, out, errs = runScan(t, append([]string{"--run", pkg}, server...)...)
	if code != exitOK || !strings.Contains(out, "Published by the running server: 9 tool(s)") || !strings.Contains(out, "create_entities") {
		t.Fatalf("text: exit %d, %s\n%s", code, errs, out)
	}
	code, out, errs = runScan(t, append([]string{"--sarif", "--run", pkg}, server...)...)
	if code != exitOK || !strings.Contains(out, "declaredNotPublished") {
		t.Fatalf("sarif: exit %d, %s\n%s", code, errs, out)
	}
}
