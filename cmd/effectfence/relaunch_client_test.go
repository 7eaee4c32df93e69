package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRelaunchedByAnMCPClientKeepsReceipts is docs/identity.md's "Restarting the same
// configuration (same command, directory and environment) gives the same scope, so its
// receipts stay valid across restarts", with a real client: the MCP TypeScript SDK starts
// `effectfence wrap` twice as Claude Desktop does (its default environment, working directory
// /), and the second launch's charge is the first one's receipt, not a second charge. Then
// `ledger ls --for -- <the same command>`, run with that same environment and directory, finds
// the very file wrap used.
func TestRelaunchedByAnMCPClientKeepsReceipts(t *testing.T) {
	t.Parallel()
	peers := peersDir(t)
	bin := effectfence(t)
	home := t.TempDir() // the default ledger lives under HOME: the SDK passes no XDG_STATE_HOME
	effects := filepath.Join(t.TempDir(), "effects")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "relaunch_client.mjs"))
	node.Env = append(os.Environ(), "HOME="+home, "PEERS="+peers, "EF_BIN="+bin, "EF_EFFECTS="+effects, "ROUNDS=2")
	var stderr bytes.Buffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	type round struct {
		Round    int    `json:"round"`
		IsError  bool   `json:"isError"`
		Replayed bool   `json:"replayed"`
		Text     string `json:"text"`
	}
	var rounds []round
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r round
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("client line %q: %v", sc.Text(), err)
		}
		rounds = append(rounds, r)
	}
	b, _ := os.ReadFile(effects)
	executions := strings.Count(string(b), "\n")
	if len(rounds) != 2 || rounds[0].IsError || rounds[0].Replayed || rounds[1].IsError || !rounds[1].Replayed ||
		rounds[1].Text != rounds[0].Text || executions != 1 {
		t.Fatalf("two launches by the client: %+v, %d executions; want the first run and the second its replay, 1 execution\nwrap's stderr:\n%s",
			rounds, executions, stderr.String())
	}
	files, _ := filepath.Glob(filepath.Join(home, ".local", "state", "effectfence", "wrap-*.db"))
	if len(files) != 1 {
		t.Fatalf("default ledger files under HOME: %v, want one", files)
	}
	// The operator, from the same setup: the SDK's default variables and the directory /.
	env := []string{"HOME=" + home}
	for _, k := range []string{"LOGNAME", "PATH", "SHELL", "TERM", "USER"} {
		if v, ok := os.LookupEnv(k); ok && !strings.HasPrefix(v, "()") {
			env = append(env, k+"="+v)
		}
	}
	ls := exec.CommandContext(ctx, bin, "ledger", "ls", "--json", "--for", "--", bin, "demo-server", "--latency", "0s", "--effects", effects)
	ls.Dir, ls.Env = "/", env
	lsOut, err := ls.CombinedOutput()
	if err != nil || !strings.Contains(string(lsOut), "charge_card") || !strings.Contains(string(lsOut), files[0]) {
		t.Fatalf("ledger ls --for from the client's setup: %v\n%s\n(wrap's file is %s)", err, lsOut, files[0])
	}
}
