package store

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Scope.Before names the default ledger file a configuration had before 2026-12-03, so wrap
// can point at a call left unknown there: the scope then kept the variables that became
// volatile that day, and the directory as os.Getwd names it. A configuration that neither
// had is unchanged and has no Before.
func TestScopeBeforeNamesTheEarlierFile(t *testing.T) {
	dir, argv := scopeWithoutLaunchVariables(t)
	if s := CurrentWrapScope(argv, ""); len(s.Before) != 0 {
		t.Fatalf("a configuration the changes left alone has Before %q", s.Before)
	}
	t.Setenv("GNOME_TERMINAL_SCREEN", "/org/gnome/Terminal/screen/5b0e5a5c_4c1f_4a5e_9d0e_1c2b3a4d5e6f")
	s := CurrentWrapScope(argv, "")
	kept := func(k string) bool { return volatile(k) && k != "GNOME_TERMINAL_SCREEN" }
	if want := wrapScope(argv, "", os.Environ(), dir, kept).LedgerName(); len(s.Before) != 1 || s.Before[0] != (Earlier{want, "2026-12-03"}) || want == s.LedgerName() {
		t.Fatalf("Before = %q, want %q of 2026-12-03 alone (the scope with the terminal's tab in it), not the scope's own %q", s.Before, want, s.LedgerName())
	}
	if !slices.Contains(VolatileEnv, "GNOME_TERMINAL_SCREEN") {
		t.Fatal("GNOME_TERMINAL_SCREEN is not volatile")
	}
	if s := CurrentWrapScope(argv, "named"); len(s.Before) != 0 {
		t.Fatalf("a named scope has Before %q", s.Before)
	}
}

// A launch variable (volatileSince20261206) counted from 2026-12-03 to 2026-12-06 and before:
// Before names the file of each, newest first, the earlier one with the terminal's tab in it
// too.
func TestScopeBeforeNamesTheFilesOfEachEarlierBuild(t *testing.T) {
	dir, argv := scopeWithoutLaunchVariables(t)
	t.Setenv("LaunchInstanceID", "A281362F-32CD-47D7-8E43-D3D5424E3853")
	s := CurrentWrapScope(argv, "")
	launch := func(k string) bool { return volatile(k) && k != "LaunchInstanceID" }
	want := wrapScope(argv, "", os.Environ(), dir, launch).LedgerName()
	if len(s.Before) != 1 || s.Before[0] != (Earlier{want, "2026-12-06"}) || want == s.LedgerName() {
		t.Fatalf("Before = %q, want %q of 2026-12-06 alone (the scope with the launch's id in it), not the scope's own %q", s.Before, want, s.LedgerName())
	}
	t.Setenv("GNOME_TERMINAL_SCREEN", "/org/gnome/Terminal/screen/5b0e5a5c_4c1f_4a5e_9d0e_1c2b3a4d5e6f")
	s = CurrentWrapScope(argv, "")
	both := func(k string) bool { return launch(k) && k != "GNOME_TERMINAL_SCREEN" }
	older := wrapScope(argv, "", os.Environ(), dir, both).LedgerName()
	if len(s.Before) != 2 || s.Before[0] != (Earlier{want, "2026-12-06"}) || s.Before[1] != (Earlier{older, "2026-12-03"}) {
		t.Fatalf("Before = %q, want %q of 2026-12-06 and %q of 2026-12-03", s.Before, want, older)
	}
}

// scopeWithoutLaunchVariables runs the test in a directory of its own, named as os.Getwd names
// it, with none of the variables that became volatile set, and returns the directory and a
// server command line.
func scopeWithoutLaunchVariables(t *testing.T) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	t.Chdir(dir)
	t.Setenv("PWD", dir)
	argv := []string{"npx", "-y", "server"}
	for _, k := range append(slices.Clone(volatileSince20261203), volatileSince20261206...) {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	return dir, argv
}
