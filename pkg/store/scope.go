package store

import (
	"os"
	"slices"
	"strings"

	"github.com/effectfence/effectfence/pkg/canon"
)

// VolatileEnv lists environment variables left out of a wrap scope: they change between two
// launches of the same configuration (terminal, shell and session bookkeeping) and say
// nothing about which account or data the server acts on. Names ending in '*' are prefixes.
var VolatileEnv = []string{
	"_", "PWD", "OLDPWD", "SHLVL", "TERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID",
	"COLORTERM", "COLUMNS", "LINES", "WINDOWID", "WINDOW", "STY", "TMUX", "TMUX_PANE", "ITERM_SESSION_ID",
	"KITTY_WINDOW_ID", "KITTY_PID", "WT_SESSION", "WT_PROFILE_ID", "ALACRITTY_WINDOW_ID", "WEZTERM_PANE",
	"VSCODE_*", "GPG_TTY", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "SSH_AGENT_PID",
	"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "XDG_SESSION_ID",
	"XDG_VTNR", "XDG_SEAT", "INVOCATION_ID", "JOURNAL_STREAM", "MANAGERPID", "SYSTEMD_EXEC_PID",
	"SECURITYSESSIONID", "TMPDIR", "HOSTNAME", "EFFECTFENCE_*",
}

func volatile(name string) bool {
	for _, v := range VolatileEnv {
		if p, ok := strings.CutSuffix(v, "*"); ok && strings.HasPrefix(name, p) || v == name {
			return true
		}
	}
	return false
}

// Scope names the server a wrap process fences: two scopes never share an identity or a
// default ledger file.
type Scope struct {
	// ID is the lowercase hex SHA-256 of the scope's canonical description.
	ID string
	// Name is the explicit --scope name, or "" for a scope derived from the configuration.
	Name string
	// Dir is the working directory and Vars the names (never the values) of the environment
	// variables that went into a derived scope.
	Dir  string
	Vars []string
}

// WrapScope returns the scope of a wrap configuration. With a name (--scope NAME) the scope is
// that name alone, for fleets whose processes run in different directories or environments
// but must share receipts. Without one it is the child's argv, the working directory and the
// environment the child receives (env, later entries winning, volatile variables left out):
// the same command with another account, data file or directory is another server. Values
// are only hashed, never stored.
func WrapScope(argv []string, name string, env []string, dir string) Scope {
	if name != "" {
		b, _ := canon.Marshal(map[string]string{"name": name})
		return Scope{ID: canon.Sum(b), Name: name}
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || volatile(k) {
			continue
		}
		vars[k] = v
	}
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	slices.Sort(names)
	b, err := canon.Marshal(map[string]any{"argv": argv, "dir": dir, "env": vars})
	if err != nil { // a value that is not valid UTF-8: hash the raw bytes instead
		b = []byte(strings.Join(argv, "\x00") + "\x01" + dir + "\x01" + strings.Join(env, "\x00"))
	}
	return Scope{ID: canon.Sum(b), Dir: dir, Vars: names}
}

// CurrentWrapScope is WrapScope for this process: its environment plus extra (as the child
// gets it) and its working directory.
func CurrentWrapScope(argv []string, name string, extra ...string) Scope {
	dir, err := os.Getwd()
	if err != nil {
		dir = os.Getenv("PWD")
	}
	return WrapScope(argv, name, append(os.Environ(), extra...), dir)
}

// LedgerName is the default ledger file name of the scope: "wrap-" and 16 hex digits.
func (s Scope) LedgerName() string { return "wrap-" + s.ID[:16] }

// WrapName is the default ledger name `effectfence wrap -- argv` uses when started from this
// process's working directory and environment, without --scope (`effectfence ledger --for`
// calls CurrentWrapScope with its own --scope, as wrap does).
func WrapName(argv []string) string { return CurrentWrapScope(argv, "").LedgerName() }

// LegacyWrapName is the default ledger name of wrap before scopes (argv only).
func LegacyWrapName(argv []string) string {
	b, err := canon.Marshal(argv)
	if err != nil {
		b = []byte(strings.Join(argv, "\x00"))
	}
	return "wrap-" + canon.Sum(b)[:16]
}

// UpstreamScope is the scope of a remote server reached at url (wrap --upstream): the URL
// itself (hashed; it may carry an account in its path or query), or the explicit name.
func UpstreamScope(url, name string) Scope {
	if name != "" {
		return WrapScope(nil, name, nil, "")
	}
	b, _ := canon.Marshal(map[string]string{"upstream": url})
	return Scope{ID: canon.Sum(b)}
}

// ForPrincipal is the scope id of the calls one principal makes in scope s: two users' (or
// keys') identical calls are two actions. The empty principal (a local client) keeps s.ID.
func (s Scope) ForPrincipal(principal string) string {
	if principal == "" {
		return s.ID
	}
	b, _ := canon.Marshal(map[string]string{"scope": s.ID, "principal": principal})
	return canon.Sum(b)
}
