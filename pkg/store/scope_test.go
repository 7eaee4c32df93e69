package store_test

import (
	"fmt"
	"slices"
	"strings"
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

// Text that is not UTF-8 (a Latin-1 path, a binary environment value, a key file's principal
// name) keeps its bytes in the scope: json.Marshal would write each invalid byte as U+FFFD,
// so two servers, accounts or principals that differ only there shared receipts. Valid text
// keeps the ids it always had.
func TestScopeKeepsBytesThatAreNotUTF8(t *testing.T) {
	env := []string{"PATH=/bin"}
	pairs := map[string][2]string{
		"argv":           {store.WrapScope([]string{"srv", "/data/caf\xe9"}, "", env, "/").ID, store.WrapScope([]string{"srv", "/data/caf\xe8"}, "", env, "/").ID},
		"env value":      {store.WrapScope([]string{"srv"}, "", []string{"ACCOUNT=\xff"}, "/").ID, store.WrapScope([]string{"srv"}, "", []string{"ACCOUNT=\xfe"}, "/").ID},
		"env name":       {store.WrapScope([]string{"srv"}, "", []string{"A\xff=1"}, "/").ID, store.WrapScope([]string{"srv"}, "", []string{"A\xfe=1"}, "/").ID},
		"directory":      {store.WrapScope([]string{"srv"}, "", env, "/d\xff").ID, store.WrapScope([]string{"srv"}, "", env, "/d\xfe").ID},
		"--scope name":   {store.WrapScope(nil, "n\xff", nil, "").ID, store.WrapScope(nil, "n\xfe", nil, "").ID},
		"upstream URL":   {store.UpstreamScope("http://h/\xff", "", nil).ID, store.UpstreamScope("http://h/\xfe", "", nil).ID},
		"principal":      {store.WrapScope(nil, "x", nil, "").ForPrincipal("key:\xff"), store.WrapScope(nil, "x", nil, "").ForPrincipal("key:\xfe")},
		"U+FFFD itself":  {store.WrapScope(nil, "n\xff", nil, "").ID, store.WrapScope(nil, "n\uFFFD", nil, "").ID},
		"invalid vs raw": {store.WrapScope([]string{"srv", "\xff"}, "", env, "/").ID, store.WrapScope([]string{"srv", "\uFFFD"}, "", env, "/").ID},
	}
	for what, p := range pairs {
		if p[0] == p[1] {
			t.Errorf("%s: two different byte strings share scope %s", what, p[0][:16])
		}
	}
	// Valid text keeps the ids earlier releases gave it (and so its ledger file and intents).
	for got, want := range map[string]string{
		store.WrapScope(nil, "billing", nil, "").ID:                                                        "3bc06e237a5ea972b4fb1223a37b844f18c74d399d4a4f2c698a4215acb71c34",
		store.WrapScope([]string{"npx", "-y", "srv é"}, "", []string{"PATH=/bin", "ACCOUNT=é"}, "/srv").ID: "25118b4747cd2318e923afe7e64a23598fe5ca5109b4e56c84b73951c5eefb03",
		store.UpstreamScope("https://h/mcp?a=é", "", nil).ID:                                               "4c418ac9992714d247fe7b36830c04502182020f22f158f06847162b36bee8e0",
		store.WrapScope(nil, "", []string{"A=1"}, "/").ID:                                                  "e6b9fb0fcdc27fcdc425dfcab9bc6c9586da7c99784b380fa490daca1fcb0231",
		store.WrapScope(nil, "billing", nil, "").ForPrincipal("key:alice"):                                 "91124ae4ad4edefe012ca85e14a96d4e0ccf7546b7cce512b7b52a1d10688116",
	} {
		if got != want {
			t.Errorf("a scope of valid text changed: %s, was %s", got, want)
		}
	}
}

// An upstream's account is in the token wrap sends it: two tokens for one URL are two scopes
// (and so never share a receipt), however a header's name is spelt; no headers keep the id of
// the URL alone; the values are never kept in the Scope.
func TestUpstreamScopeHashesItsHeaders(t *testing.T) {
	const u = "https://mcp.example.com/mcp"
	alice := store.UpstreamScope(u, "", map[string][]string{"Authorization": {"Bearer alice-secret"}})
	bob := store.UpstreamScope(u, "", map[string][]string{"Authorization": {"Bearer bob-secret"}})
	if alice.ID == bob.ID {
		t.Fatal("two tokens for one upstream share a scope")
	}
	if bare := store.UpstreamScope(u, "", nil); bare.ID == alice.ID || bare.ID != store.UpstreamScope(u, "", map[string][]string{}).ID {
		t.Fatal("no headers: not the URL's own scope")
	}
	if low := store.UpstreamScope(u, "", map[string][]string{"authorization": {"Bearer alice-secret"}}); low.ID != alice.ID {
		t.Fatal("a header name's spelling changed the scope")
	}
	if two := store.UpstreamScope(u, "", map[string][]string{"Authorization": {"Bearer alice-secret"}, "X-Tenant": {"7"}}); two.ID == alice.ID {
		t.Fatal("another header's value left the scope unchanged")
	}
	if inv := store.UpstreamScope(u, "", map[string][]string{"X-Account": {"\xff"}}); inv.ID == store.UpstreamScope(u, "", map[string][]string{"X-Account": {"\xfe"}}).ID {
		t.Fatal("header values that differ only in invalid bytes share a scope")
	}
	if named := store.UpstreamScope(u, "pay", map[string][]string{"Authorization": {"Bearer alice-secret"}}); named.ID != store.WrapScope(nil, "pay", nil, "").ID {
		t.Fatal("--scope NAME is not the name alone")
	}
	if strings.Contains(fmt.Sprintf("%+v", alice), "alice-secret") || len(alice.Vars) != 1 || alice.Vars[0] != "Authorization" {
		t.Fatalf("the scope keeps %+v, want the header names only", alice)
	}
}

// Variables a terminal, a desktop session or an MCP client sets to name its tab, pane,
// instance, launch or session change between two launches of one configuration (a client
// started from another GNOME Terminal tab, the next Claude Code session) and say nothing about
// the server's account or data: each left out, the scope stays. Values as those programs
// write them.
func TestScopeLeavesOutSessionNames(t *testing.T) {
	argv, base := []string{"npx", "-y", "server"}, []string{"PATH=/bin", "ACCOUNT=A"}
	want := store.WrapScope(argv, "", base, "/srv").ID
	for name, values := range map[string][2]string{
		"CLAUDE_CODE_SESSION_ID":        {"0f3c1a52-8d1e-4c7b-9a61-3b2f6e1d9c01", "7b9e2d44-1f0a-4e3c-8c55-6a7d0b2e4f18"},
		"CLAUDE_CODE_SSE_PORT":          {"41237", "52911"},
		"GNOME_TERMINAL_SCREEN":         {"/org/gnome/Terminal/screen/5b0e5a5c_4c1f_4a5e_9d0e_1c2b3a4d5e6f", "/org/gnome/Terminal/screen/9a8b7c6d_5e4f_4a3b_8c2d_1e0f9a8b7c6d"},
		"GNOME_TERMINAL_SERVICE":        {":1.112", ":1.245"},
		"KONSOLE_DBUS_SESSION":          {"/Sessions/1", "/Sessions/3"},
		"KONSOLE_DBUS_WINDOW":           {"/Windows/1", "/Windows/2"},
		"KONSOLE_DBUS_SERVICE":          {":1.90", ":1.131"},
		"TERMINATOR_UUID":               {"urn:uuid:1f2e3d4c-5b6a-4978-8a6b-5c4d3e2f1a0b", "urn:uuid:0a1b2c3d-4e5f-4a6b-9c8d-7e6f5a4b3c2d"},
		"TILIX_ID":                      {"3c5e0f4a-2b1d-4e6f-8a9b-0c1d2e3f4a5b", "8f7e6d5c-4b3a-4c2d-9e1f-0a9b8c7d6e5f"},
		"GUAKE_TAB_UUID":                {"4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a", "a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d"},
		"ALACRITTY_LOG":                 {"/tmp/Alacritty-4122.log", "/tmp/Alacritty-9310.log"},
		"ALACRITTY_SOCKET":              {"/run/user/1000/Alacritty-wayland-0-4122.sock", "/run/user/1000/Alacritty-wayland-0-9310.sock"},
		"WEZTERM_UNIX_SOCKET":           {"/run/user/1000/wezterm/gui-sock-2231", "/run/user/1000/wezterm/gui-sock-7710"},
		"ZELLIJ_SESSION_NAME":           {"quiet-tuba", "brave-otter"},
		"ZELLIJ_PANE_ID":                {"0", "4"},
		"SESSION_MANAGER":               {"local/box:@/tmp/.ICE-unix/1822,unix/box:/tmp/.ICE-unix/1822", "local/box:@/tmp/.ICE-unix/2010,unix/box:/tmp/.ICE-unix/2010"},
		"DESKTOP_STARTUP_ID":            {"gnome-shell/Terminal/2210-4-box_TIME1234", "gnome-shell/Terminal/2210-9-box_TIME9876"},
		"XDG_ACTIVATION_TOKEN":          {"gnome-shell/Terminal/2210-4-box_TIME1234", "gnome-shell/Terminal/2210-9-box_TIME9876"},
		"LaunchInstanceID":              {"A281362F-32CD-47D7-8E43-D3D5424E3853", "951B4739-66F6-4FD9-8778-5009F40807F0"},
		"XPC_SERVICE_NAME":              {"application.com.microsoft.VSCode.59852660.59852666", "application.com.microsoft.VSCode.9361502674.9361502680"},
		"GIO_LAUNCHED_DESKTOP_FILE_PID": {"2065", "559791"},
		"CHROME_CRASHPAD_PIPE_NAME":     {`\\.\pipe\LOCAL\crashpad_2184_LLVQRKLMWECNQUVR`, `\\.\pipe\LOCAL\crashpad_9120_QHZTBWMKCEYRNDPA`},
		"KITTY_PUBLIC_KEY":              {"1:G;!_?+qIC+mo_k@Rfr5ML3=Ztot^C!L-PDSVOAeC", "1:^1R-7)Aw|}io+D^KqaYVJF0R&a!f&dpX}gSSEIH&"},
		"KITTY_LISTEN_ON":               {"unix:/tmp/kitty-4122", "unix:/tmp/kitty-9310"},
		"SHELL_SESSION_ID":              {"4a8dd494278e4d5ea2f064b0603897df", "9c1e0b7d2f4a4e6b8a3d5c7e9f1b2d4c"},
	} {
		a := store.WrapScope(argv, "", append(slices.Clone(base), name+"="+values[0]), "/srv").ID
		b := store.WrapScope(argv, "", append(slices.Clone(base), name+"="+values[1]), "/srv").ID
		if a != want || b != want {
			t.Errorf("%s: two launches that differ only in it are two scopes", name)
		}
	}
}
