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
	dir := t.TempDir()
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	t.Chdir(dir)
	t.Setenv("PWD", dir)
	argv := []string{"npx", "-y", "server"}
	for _, k := range volatileSince20261203 {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if s := CurrentWrapScope(argv, ""); s.Before != "" {
		t.Fatalf("a configuration the change left alone has Before %q", s.Before)
	}
	t.Setenv("GNOME_TERMINAL_SCREEN", "/org/gnome/Terminal/screen/5b0e5a5c_4c1f_4a5e_9d0e_1c2b3a4d5e6f")
	s := CurrentWrapScope(argv, "")
	kept := func(k string) bool { return volatile(k) && k != "GNOME_TERMINAL_SCREEN" }
	if want := wrapScope(argv, "", os.Environ(), dir, kept).LedgerName(); s.Before != want || s.Before == s.LedgerName() {
		t.Fatalf("Before = %q, want %q (the scope with the terminal's tab in it), not the scope's own %q", s.Before, want, s.LedgerName())
	}
	if !slices.Contains(VolatileEnv, "GNOME_TERMINAL_SCREEN") {
		t.Fatal("GNOME_TERMINAL_SCREEN is not volatile")
	}
	if s := CurrentWrapScope(argv, "named"); s.Before != "" {
		t.Fatalf("a named scope has Before %q", s.Before)
	}
}
