package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestScopeLogLineCountsTheVariablesThatWentIn is docs/identity.md's startup line: "wrap logs
// the scope's short id, the directory and how many variables went into it". With an
// environment of its own (one variable given twice, volatile ones, wrap's own settings), the
// count is that of the distinct variables that are not left out, and the directory is the
// real one; with --scope NAME the line names the scope instead.
func TestScopeLogLineCountsTheVariablesThatWentIn(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	path, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true command")
	}
	env := []string{
		"PATH=" + filepath.Dir(path), "HOME=" + dir, "ACCOUNT=a", "ACCOUNT=b", // three variables
		"TERM=xterm", "SHLVL=2", "PWD=" + dir, "CLAUDE_CODE_SESSION_ID=s-1", "VSCODE_PID=7", // left out
		"EFFECTFENCE_LEDGER=memory", "XDG_STATE_HOME=" + filepath.Join(dir, "state"), // XDG_STATE_HOME counts: four
	}
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{nil, fmt.Sprintf(": the command, directory %s and 4 environment variables (values hashed; --scope NAME to set it)\n", dir)},
		{[]string{"--scope", "billing"}, `effectfence wrap: scope "billing" (`},
	} {
		cmd := exec.Command(bin, append(append([]string{"wrap"}, c.flags...), "--", path)...)
		cmd.Dir, cmd.Env, cmd.Stdin = dir, env, strings.NewReader("")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("wrap %v: %v; want a line holding %q, got:\n%s", c.flags, err, c.want, out)
		}
	}
}
