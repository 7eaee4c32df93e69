//go:build unix

package demo_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

// TestTryItStepsOnARealServer: the demo ends (and the README shows it ending) with three
// commands to try on "your own MCP server". This takes them as the real binary prints them,
// puts in a real npm MCP server (@modelcontextprotocol/server-memory, its create_entities) and
// runs each line through sh as a user would paste it: step 1 probes the server raw (a verdict,
// exit 0 or 3: twelve racing creates may or may not answer differently), step 3 probes it
// behind `effectfence wrap` (step 2's command, word for word): twelve answers, eleven of them
// replays of the one execution, exit 0, and the server's file holds the entity once.
func TestTryItStepsOnARealServer(t *testing.T) {
	t.Parallel()
	server, _ := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-memory")
	if _, err := os.Stat(server); err != nil {
		t.Skip("skipping: @modelcontextprotocol/server-memory is not installed; run scripts/install-peers")
	}
	r := cmdtest.Run(t, nil, bin, "demo")
	if r.Code != 0 {
		t.Fatalf("demo: exit %d\n%s", r.Code, r.Stderr)
	}
	_, try, ok := strings.Cut(r.Stdout, "Try it on your own MCP server:\n")
	if !ok {
		t.Fatalf("the demo no longer ends with the steps to try:\n%s", r.Stdout)
	}
	steps := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+\d\. ([a-z ]+):\s+(effectfence .*?)(?:\s{2,}\(.*\))?$`).FindAllStringSubmatch(try, -1) {
		steps[m[1]] = m[2]
	}
	if len(steps) != 3 || steps["see the problem"] == "" || steps["put up the fence"] == "" || steps["see it hold"] == "" {
		t.Fatalf("want the three steps of the demo's end, got %q from:\n%s", steps, try)
	}
	if !strings.Contains(steps["see it hold"], steps["put up the fence"]) {
		t.Fatalf("step 3 (%s) does not run step 2's command (%s)", steps["see it hold"], steps["put up the fence"])
	}
	dir := t.TempDir()
	fill := func(line, memFile string) string {
		return strings.NewReplacer(
			"<tool>", "create_entities",
			"<json object>", `{"entities":[{"name":"order-123","entityType":"order","observations":["charged 49.00"]}]}`,
			"<your server command>", "env MEMORY_FILE_PATH="+memFile+" "+server,
		).Replace(line)
	}
	// The user's PATH finds effectfence: the binary under test.
	env := []string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"), "XDG_STATE_HOME=" + filepath.Join(dir, "state")}
	entities := func(memFile string) int {
		b, _ := os.ReadFile(memFile)
		return strings.Count(string(b), `"name":"order-123"`)
	}

	raw := filepath.Join(dir, "raw.json")
	r = cmdtest.Run(t, env, "/bin/sh", "-c", fill(steps["see the problem"], raw))
	if (r.Code != 0 && r.Code != 3) || !regexp.MustCompile(`(?m)^(INCONCLUSIVE from responses|PROVEN DOUBLE-FIRE|no race surface observed)`).MatchString(r.Stdout) {
		t.Fatalf("step 1: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}

	fenced := filepath.Join(dir, "fenced.json")
	r = cmdtest.Run(t, env, "/bin/sh", "-c", fill(steps["see it hold"], fenced))
	if r.Code != 0 || !regexp.MustCompile(`succeeded\s+│ 12\s`).MatchString(r.Stdout) ||
		!strings.Contains(r.Stdout, "11 answer(s) were marked replayed by effectfence wrap") {
		t.Fatalf("step 3: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if n := entities(fenced); n != 1 {
		t.Fatalf("behind the fence the server's file holds the entity %d times, want 1", n)
	}
}
