package store

import (
	"encoding/base64"
	"encoding/json"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/canon"
)

// VolatileEnv lists environment variables left out of a wrap scope: they change between two
// launches of the same configuration (terminal, shell and session bookkeeping) and say
// nothing about which account or data the server acts on. Names ending in '*' are prefixes.
var VolatileEnv = append([]string{
	"_", "PWD", "OLDPWD", "SHLVL", "TERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID",
	"COLORTERM", "COLUMNS", "LINES", "WINDOWID", "WINDOW", "STY", "TMUX", "TMUX_PANE", "ITERM_SESSION_ID",
	"KITTY_WINDOW_ID", "KITTY_PID", "WT_SESSION", "WT_PROFILE_ID", "ALACRITTY_WINDOW_ID", "WEZTERM_PANE",
	"VSCODE_*", "GPG_TTY", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "SSH_AGENT_PID",
	"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "XDG_SESSION_ID",
	"XDG_VTNR", "XDG_SEAT", "INVOCATION_ID", "JOURNAL_STREAM", "MANAGERPID", "SYSTEMD_EXEC_PID",
	"SECURITYSESSIONID", "TMPDIR", "HOSTNAME", "EFFECTFENCE_*",
}, append(volatileSince20261203, volatileSince20261206...)...)

func volatile(name string) bool {
	for _, v := range VolatileEnv {
		if p, ok := strings.CutSuffix(v, "*"); ok && strings.HasPrefix(name, p) || v == name {
			return true
		}
	}
	return false
}

// volatileSince20261203 are the names VolatileEnv gained on 2026-12-03: before, they went into
// the scope (Scope.Before is the scope they gave).
var volatileSince20261203 = []string{
	// MCP clients' own session bookkeeping: Claude Code gives each session's stdio servers a
	// new CLAUDE_CODE_SESSION_ID, and passes on the IDE extension's CLAUDE_CODE_SSE_PORT.
	"CLAUDE_CODE_SESSION_ID", "CLAUDE_CODE_SSE_PORT",
	// Terminals and desktop sessions that name their tab, pane, window, instance or launch
	// (an MCP client started from a terminal passes its environment on to its servers).
	"GNOME_TERMINAL_SCREEN", "GNOME_TERMINAL_SERVICE", "KONSOLE_DBUS_SESSION", "KONSOLE_DBUS_WINDOW",
	"KONSOLE_DBUS_SERVICE", "TERMINATOR_UUID", "TILIX_ID", "GUAKE_TAB_UUID", "ALACRITTY_LOG",
	"ALACRITTY_SOCKET", "WEZTERM_UNIX_SOCKET", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID",
	"SESSION_MANAGER", "DESKTOP_STARTUP_ID", "XDG_ACTIVATION_TOKEN",
}

// volatileSince20261206 are the names VolatileEnv gained on 2026-12-06: what a desktop's
// launcher sets for one launch of an application, which an MCP client started so (and a
// terminal or IDE, and a client run in it) passes on to its servers. On macOS launchd gives
// every process it launches a new LaunchInstanceID (a UUID), and LaunchServices names an
// application it opens in XPC_SERVICE_NAME with numbers of that launch
// ("application.com.microsoft.VSCode.59852660.59852666"); GNOME's launcher sets
// GIO_LAUNCHED_DESKTOP_FILE_PID to the pid of the application it starts; an Electron
// application (VS Code, Cursor) names its crash reporter's pipe, with its pid and random
// letters, in CHROME_CRASHPAD_PIPE_NAME ("\\.\pipe\LOCAL\crashpad_2184_LLVQRKLMWECNQUVR" on
// Windows). Terminals name an instance or a tab too, beside the variables left out on
// 2026-12-03: kitty its remote control's key, new at each launch (KITTY_PUBLIC_KEY), and
// socket ("unix:/tmp/kitty-4122", KITTY_LISTEN_ON); Konsole each session
// (SHELL_SESSION_ID="4a8dd494278e4d5ea2f064b0603897df"). Counted, the next launch of the
// client was another scope with another default ledger file: its duplicate ran again, and a
// call left unknown in one launch was not fenced in the next.
var volatileSince20261206 = []string{"LaunchInstanceID", "XPC_SERVICE_NAME", "GIO_LAUNCHED_DESKTOP_FILE_PID",
	"CHROME_CRASHPAD_PIPE_NAME", "KITTY_PUBLIC_KEY", "KITTY_LISTEN_ON", "SHELL_SESSION_ID"}

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
	// Before are the default ledger names this derived scope had under earlier builds, where
	// they differ from its own, newest first: wrap names each file that exists at startup, a
	// call left unknown there being fenced there and not here.
	Before []Earlier
}

// Earlier is the default ledger name a derived scope had before a change of VolatileEnv or of
// how the directory is read.
type Earlier struct {
	Name string // as LedgerName gives it
	// Until is the day the change came: "2026-12-06", the variables of volatileSince20261206
	// counted then; "2026-12-03", those of volatileSince20261203 too, and the directory was
	// the path os.Getwd gives (a symlink's, from $PWD).
	Until string
}

// WrapScope returns the scope of a wrap configuration. With a name (--scope NAME) the scope is
// that name alone, for fleets whose processes run in different directories or environments
// but must share receipts. Without one it is the child's argv, the working directory and the
// environment the child receives (env, later entries winning, volatile variables left out):
// the same command with another account, data file or directory is another server. Values
// are only hashed, never stored.
func WrapScope(argv []string, name string, env []string, dir string) Scope {
	return wrapScope(argv, name, env, dir, volatile)
}

func wrapScope(argv []string, name string, env []string, dir string, volatile func(string) bool) Scope {
	if name != "" {
		return Scope{ID: describe(map[string]any{"name": text(name)}), Name: name}
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
	var args []any // nil argv stays null, as before
	for _, a := range argv {
		args = append(args, text(a))
	}
	values := make(map[string]any, len(vars))
	for k, v := range vars {
		if !utf8.ValidString(k) {
			// A name from the environment never holds NUL, so this spelling is no other name.
			k = "\x00" + base64.StdEncoding.EncodeToString([]byte(k))
		}
		values[k] = text(v)
	}
	return Scope{ID: describe(map[string]any{"argv": args, "dir": text(dir), "env": values}), Dir: dir, Vars: names}
}

// text is s as the description of a scope holds it: s itself when it is valid UTF-8, else an
// object holding its bytes. json.Marshal writes each invalid byte as U+FFFD, so two servers,
// accounts or principals that differed only there (a Latin-1 path, a binary environment value)
// were one scope and shared receipts. No string equals an object, so valid text keeps the
// description, and the id, it always had.
func text(s string) any {
	if utf8.ValidString(s) {
		return s
	}
	return map[string]string{"bytes_base64": base64.StdEncoding.EncodeToString([]byte(s))}
}

// describe is the hex SHA-256 of the canonical JSON of v, whose strings are valid UTF-8
// (text). canon refuses only a description beyond canon.MaxInput; encoding/json's form (keys
// sorted, every string valid) is as exact for it.
func describe(v any) string {
	b, err := canon.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(v)
	}
	return canon.Sum(b)
}

// CurrentWrapScope is WrapScope for this process: its environment plus extra (as the child
// gets it) and its working directory by its real path.
func CurrentWrapScope(argv []string, name string, extra ...string) Scope {
	dir, named := workingDir()
	env := append(os.Environ(), extra...)
	s := WrapScope(argv, name, env, dir)
	if name == "" {
		seen := map[string]bool{s.ID: true}
		for _, era := range []struct {
			until, dir string
			gained     []string
		}{
			{"2026-12-06", dir, volatileSince20261206},
			{"2026-12-03", named, append(slices.Clone(volatileSince20261206), volatileSince20261203...)},
		} {
			wasVolatile := func(k string) bool { return volatile(k) && !slices.Contains(era.gained, k) }
			if before := wrapScope(argv, "", env, era.dir, wasVolatile); !seen[before.ID] {
				seen[before.ID] = true
				s.Before = append(s.Before, Earlier{Name: before.LedgerName(), Until: era.until})
			}
		}
	}
	return s
}

// workingDir is this process's working directory by its real path (symlinks resolved), and
// as os.Getwd names it. os.Getwd answers $PWD whenever that names the same directory, and a
// shell that cds through a symlink keeps the link's path there: a scope that held that path
// stayed the same after the link was pointed at another directory (a server acting on
// another directory's data was handed the first one's receipts), and the same directory
// reached by its real path (an MCP client that sets the cwd) was another scope.
func workingDir() (real, named string) {
	named, err := os.Getwd()
	if err != nil {
		named = os.Getenv("PWD")
	}
	real = named
	if r, err := filepath.EvalSymlinks(named); err == nil && filepath.IsAbs(r) {
		real = r
	}
	return real, named
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

// UpstreamScope is the scope of a remote server reached at url (wrap --upstream) with header
// sent on every request: the URL itself (it may carry an account in its path or query) and
// the headers (the account is in a token as a stdio server's is in its environment: two
// tokens for one URL are two accounts, which must never share a receipt), hashed, values
// never stored; or the explicit name. Without headers the id is the URL's alone, as before
// headers counted. Vars holds the headers' names (canonical form).
func UpstreamScope(url, name string, header map[string][]string) Scope {
	if name != "" {
		return WrapScope(nil, name, nil, "")
	}
	d := map[string]any{"upstream": text(url)}
	if len(header) == 0 {
		return Scope{ID: describe(d)}
	}
	keys := make([]string, 0, len(header))
	for k := range header {
		keys = append(keys, k)
	}
	slices.Sort(keys) // spellings of one name merge in one order
	values := map[string][]any{}
	var names []string
	for _, k := range keys {
		c := textproto.CanonicalMIMEHeaderKey(k)
		if _, seen := values[c]; !seen {
			names = append(names, c)
		}
		for _, v := range header[k] {
			values[c] = append(values[c], text(v))
		}
	}
	slices.Sort(names)
	d["headers"] = values
	return Scope{ID: describe(d), Vars: names}
}

// ForPrincipal is the scope id of the calls one principal makes in scope s: two users' (or
// keys') identical calls are two actions. The empty principal (a local client) keeps s.ID.
func (s Scope) ForPrincipal(principal string) string {
	if principal == "" {
		return s.ID
	}
	return describe(map[string]any{"scope": s.ID, "principal": text(principal)})
}
