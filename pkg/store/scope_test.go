package store_test

import (
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

func TestWrapScope(t *testing.T) {
	argv := []string{"npx", "-y", "server"}
	env := []string{"PATH=/bin", "ACCOUNT=A", "TERM=xterm", "SHLVL=1", "PWD=/x", "VSCODE_PID=1", "EFFECTFENCE_LEDGER=/l.db"}
	base := store.WrapScope(argv, "", env, "/srv")
	if len(base.ID) != 64 || base.LedgerName() != "wrap-"+base.ID[:16] || len(base.Vars) != 2 {
		t.Fatalf("scope: %+v", base)
	}
	// Volatile variables and their values do not matter: restarting the same configuration
	// from another terminal keeps the scope.
	again := store.WrapScope(argv, "", []string{"SHLVL=3", "ACCOUNT=A", "TERM=dumb", "_=/usr/bin/env", "PATH=/bin", "OLDPWD=/", "VSCODE_PID=9"}, "/srv")
	if again.ID != base.ID {
		t.Fatal("volatile variables changed the scope")
	}
	for name, other := range map[string]store.Scope{
		"another account":   store.WrapScope(argv, "", []string{"PATH=/bin", "ACCOUNT=B"}, "/srv"),
		"a new variable":    store.WrapScope(argv, "", append(env, "MEMORY_FILE_PATH=/m"), "/srv"),
		"another directory": store.WrapScope(argv, "", env, "/home"),
		"another command":   store.WrapScope([]string{"npx", "-y", "server", "--x"}, "", env, "/srv"),
		"an explicit name":  store.WrapScope(argv, "billing", env, "/srv"),
	} {
		if other.ID == base.ID || other.LedgerName() == base.LedgerName() {
			t.Errorf("%s shares the scope", name)
		}
	}
	// Later entries win, as in the child's environment.
	if store.WrapScope(argv, "", []string{"PATH=/bin", "ACCOUNT=B", "ACCOUNT=A"}, "/srv").ID != base.ID {
		t.Error("a later entry must win")
	}
	// An explicit name is the whole scope: any directory, any environment.
	a := store.WrapScope(argv, "billing", env, "/srv")
	b := store.WrapScope([]string{"other"}, "billing", nil, "/elsewhere")
	if a.ID != b.ID || a.Name != "billing" {
		t.Fatal("--scope NAME must be the same scope everywhere")
	}
	// The environment's values are never kept.
	for _, v := range base.Vars {
		if v == "A" || v == "/bin" {
			t.Fatal("a value was kept")
		}
	}
}
