package demo_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/demo"
	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

var bin string

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(m, &bin)) }

// TestDemo runs `effectfence demo` twice: Act 1 shows 12 distinct charges and 12 executions,
// Act 2 12 clean answers and exactly 1 execution, both measured by the server's effects file;
// and the two runs print the same text.
func TestDemo(t *testing.T) {
	first := cmdtest.Run(t, []string{"NO_COLOR="}, bin, "demo")
	if first.Code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", first.Code, first.Stdout, first.Stderr)
	}
	out := first.Stdout
	acts := strings.SplitN(out, "Act 2", 2)
	if len(acts) != 2 {
		t.Fatalf("no Act 2 in:\n%s", out)
	}
	act1, act2 := acts[0], acts[1]
	if !strings.Contains(act1, "answers:    12 clean, 12 distinct charges") || !strings.Contains(act1, "executions: 12,") ||
		!strings.Contains(act1, "PROVEN DOUBLE-FIRE") {
		t.Errorf("Act 1 should show 12 distinct charges and 12 executions:\n%s", act1)
	}
	ids := regexp.MustCompile(`ch_demo_\d{4}`).FindAllString(strings.SplitN(act1, "executions", 2)[0], -1)
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(seen) != 12 {
		t.Errorf("Act 1 lists %d distinct charge ids, want 12: %v", len(seen), ids)
	}
	if !strings.Contains(act2, "answers:    12 clean, all the same charge: ch_demo_0001") || !strings.Contains(act2, "executions: 1,") ||
		!strings.Contains(act2, "EXACTLY ONCE") {
		t.Errorf("Act 2 should show 12 clean answers and exactly 1 execution:\n%s", act2)
	}
	if !strings.Contains(out, "effectfence wrap -- <your server command>") || !strings.Contains(out, "effectfence probe --tool") {
		t.Errorf("the demo must end with the command to try on one's own server:\n%s", out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour escapes written to a pipe")
	}
	second := cmdtest.Run(t, nil, bin, "demo")
	if second.Code != 0 || second.Stdout != first.Stdout {
		t.Errorf("a second demo differs from the first (exit %d):\n%s", second.Code, second.Stdout)
	}
}

func TestDemoRejectsArguments(t *testing.T) {
	r := cmdtest.Run(t, nil, bin, "demo", "now")
	if r.Code != 2 || !strings.Contains(r.Stderr, "demo takes no arguments") || r.Stdout != "" {
		t.Fatalf("exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
}

// TestDemoWithoutAScratchFolderSaysWhy: a TMPDIR that does not exist is an error that names
// what the demo needed it for; it was "stat /nonexistent: no such file or directory".
func TestDemoWithoutAScratchFolderSaysWhy(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	r := cmdtest.Run(t, []string{"TMPDIR=" + missing}, bin, "demo")
	if r.Code != 1 || !strings.Contains(r.Stderr, "scratch folder for the demo server's effects files") ||
		!strings.Contains(r.Stderr, "TMPDIR") || r.Stdout != "" {
		t.Fatalf("exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
}

func TestDemoServerIsHidden(t *testing.T) {
	r := cmdtest.Run(t, nil, bin, "--help")
	if r.Code != 0 || strings.Contains(r.Stdout, "demo-server") || !strings.Contains(r.Stdout, "demo") {
		t.Fatalf("help should list demo but not demo-server (exit %d):\n%s", r.Code, r.Stdout)
	}
}

func TestCountEffects(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.CountEffects(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing effects file counted as zero")
	}
	p := filepath.Join(dir, "e")
	if err := os.WriteFile(p, []byte("charge_card ch_demo_0001 4900\ncharge_card ch_demo_0002 4900\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := demo.CountEffects(p); err != nil || n != 2 {
		t.Fatalf("CountEffects = %d, %v; want 2", n, err)
	}
	r := cmdtest.Run(t, nil, bin, "demo-server", "--count", p)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "2" {
		t.Fatalf("demo-server --count: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = cmdtest.Run(t, nil, bin, "demo-server", "--count", filepath.Join(dir, "missing"))
	if r.Code == 0 || r.Stdout != "" {
		t.Fatalf("demo-server --count of a missing file: exit %d stdout %q", r.Code, r.Stdout)
	}
}

// TestDemoIgnoresTheUsersFenceSettings: the demo's fence is wrap with its defaults, whatever
// fence settings the shell holds for the user's own servers. Before, Act 2's wrap read them:
// a policy file that leaves charge_card unfenced made the demo print 12 executions behind
// the fence, and a lease or TTL the user had mistyped stopped the demo with wrap's error.
func TestDemoIgnoresTheUsersFenceSettings(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "mine.yaml")
	if err := os.WriteFile(policy, []byte("version: 1\ntools:\n  charge_card:\n    fence: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, env := range [][]string{
		{"EFFECTFENCE_POLICY=" + policy},
		{"EFFECTFENCE_LEASE_SECS=abc", "EFFECTFENCE_RESULT_TTL_SECS=0", "EFFECTFENCE_ON_LEASE_EXPIRY=nonsense"},
	} {
		r := cmdtest.Run(t, append([]string{"NO_COLOR="}, env...), bin, "demo")
		if r.Code != 0 || !strings.Contains(r.Stdout, "executions: 1,") {
			t.Errorf("demo with %v exited %d\nstdout:\n%s\nstderr:\n%s", env, r.Code, r.Stdout, r.Stderr)
		}
	}
}
