package httpfront_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"testing"
	"time"
)

// followKeys are the API keys of the gateway tests of a task that follows: two principals.
const (
	followAlice = "alice-follow-token-0123456789"
	followBob   = "bob-follow-token-0123456789ab"
)

// followGateway starts `effectfence wrap --listen` in front of server-everything, with the
// keys of alice and bob, on the ledger given (a new SQLite file if ""), with flags added.
func followGateway(t *testing.T, ledger string, flags ...string) (*proc, string) {
	t.Helper()
	peers, everything := everythingPeers(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("alice "+followAlice+"\nbob "+followBob+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ledger == "" {
		ledger = filepath.Join(dir, "ledger.db")
	}
	argv := append([]string{binary(t), "wrap", "--listen", "127.0.0.1:0", "--api-keys", keys, "--ledger", ledger, "--grace", "500ms"}, flags...)
	argv = append(argv, "--", everything)
	return startProcess(t, "gateway", "effectfence wrap: listening on ", nil, argv...), peers
}

// everythingPeers is the npm peers' directory and server-everything, or skips the test.
func everythingPeers(t *testing.T) (string, string) {
	t.Helper()
	peers, _ := filepath.Abs("../../.peers")
	everything := filepath.Join(peers, "node_modules/.bin/mcp-server-everything")
	for _, p := range []string{filepath.Join(peers, "node_modules/@modelcontextprotocol/sdk/package.json"), everything} {
		if _, err := os.Stat(p); err != nil {
			t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	return peers, everything
}

// sdkAgent is one real TypeScript SDK client of the gateway (testdata/follow_client.mjs).
type sdkAgent struct {
	t      *testing.T
	role   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *logBuf
	out    []byte
	err    error
	done   chan struct{}
}

// startAgent runs follow_client.mjs as role, with token, calling simulate-research-query about
// topic (ambiguous: the server asks its agent a question).
func startAgent(t *testing.T, peers, url, token, role, topic string) *sdkAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "follow_client.mjs"))
	cmd.Env = append(os.Environ(), "PEERS="+peers, "URL="+url, "TOKEN="+token, "ROLE="+role,
		"TOOL=simulate-research-query", fmt.Sprintf(`TOOL_ARGS={"topic":%q,"ambiguous":true}`, topic))
	a := &sdkAgent{t: t, role: role, cmd: cmd, stderr: &logBuf{}, done: make(chan struct{})}
	cmd.Stderr = a.stderr
	var err error
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.err = cmd.Wait()
		a.out = []byte(out.String())
		cancel()
		close(a.done)
	}()
	t.Cleanup(func() {
		a.stdin.Close()
		cancel()
		<-a.done
		if t.Failed() {
			t.Logf("%s agent's stderr:\n%s", role, a.stderr.String())
		}
	})
	return a
}

// line waits for the agent's stderr line that starts with prefix and returns the rest.
func (a *sdkAgent) line(prefix string) string {
	a.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(a.stderr.String()))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				return rest
			}
		}
		select {
		case <-a.done:
			a.t.Fatalf("the %s agent ended before it said %q: %s %v\n%s", a.role, prefix, a.out, a.err, a.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("the %s agent never said %q:\n%s", a.role, prefix, a.stderr.String())
		}
	}
}

// agentReport is what follow_client.mjs reports the SDK handed its agent.
type agentReport struct {
	Session  string
	Statuses []string
	TaskID   string
	// StatusMessage is the task's, as the SDK last saw it.
	StatusMessage string
	Text          string
	Replayed      bool
	Error         *string
}

func (a *sdkAgent) report() agentReport {
	a.t.Helper()
	select {
	case <-a.done:
	case <-time.After(3 * time.Minute):
		a.t.Fatalf("the %s agent never ended:\n%s", a.role, a.stderr.String())
	}
	var r agentReport
	if a.err != nil || json.Unmarshal(a.out, &r) != nil {
		a.t.Fatalf("the %s agent: %s %v\n%s", a.role, a.out, a.err, a.stderr.String())
	}
	return r
}

// waitProcLog waits for the gateway's log to hold s.
func waitProcLog(t *testing.T, p *proc, what, s string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(p.log.String(), s); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the gateway never logged %q:\n%s", what, s, p.log.String())
		}
	}
}

// TestGatewayTaskFollowsTheFlight: through `wrap --listen`, real TypeScript SDK clients of one
// principal send one task-augmented call (server-everything's simulate-research-query, the
// first agent's task held input_required by a question it does not answer yet). The duplicates
// past --wait get working tasks of wrap's own that follow the first execution: one followed to
// the end is handed the recorded result, one whose client dropped its connections without a
// DELETE stops following once its session idles out, one whose session was ended with DELETE
// stops following; another principal, and another session of the same one, cannot see
// them; the call ran once.
func TestGatewayTaskFollowsTheFlight(t *testing.T) {
	t.Parallel()
	// The idle bound is 6 s: with 2 s, a session this test had just opened idled out before its
	// next request at a full CI run's load (404, "unknown or closed session").
	gateway, peers := followGateway(t, "", "--wait", "1s", "--session-idle", "6s")
	const topic = "gateway follower"
	first := startAgent(t, peers, gateway.url, followAlice, "first", topic)
	first.line("asked") // the first execution now waits for its agent's answer, past any --wait
	follow := startAgent(t, peers, gateway.url, followAlice, "follow", topic)
	followTask := strings.TrimSpace(follow.line("task working "))
	if !strings.HasPrefix(followTask, "effectfence-task-") {
		t.Fatalf("the duplicate's task: %q, want one of wrap's own", followTask)
	}
	closed := startAgent(t, peers, gateway.url, followAlice, "close", topic)
	closedTask := strings.TrimSpace(closed.line("task working "))
	closedRep := closed.report()
	deleted := startAgent(t, peers, gateway.url, followAlice, "delete", topic)
	deletedTask := strings.TrimSpace(deleted.line("task working "))
	deleted.report()
	waitProcLog(t, gateway, "the deleted session's follower", "task "+deletedTask+" stopped following")

	// Nobody else sees the tasks: not bob, nor another session of alice's.
	g := &gw{t: t, url: gateway.url}
	ah, bh := hdr{"Authorization": "Bearer " + followAlice}, hdr{"Authorization": "Bearer " + followBob}
	for who, h := range map[string]hdr{"bob": bh, "another session of alice's": ah} {
		sid := g.open(h)
		for _, id := range []string{followTask, closedTask} {
			r := g.mustPost(sid, h, `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"`+id+`"}}`)
			if r.status != 200 || !strings.Contains(r.raw[len(r.raw)-1], "not found") {
				t.Fatalf("%s's tasks/get of %s: %d %v", who, id, r.status, r.raw)
			}
		}
		r := g.mustPost(sid, h, `{"jsonrpc":"2.0","id":3,"method":"tasks/list","params":{}}`)
		if l := strings.Join(r.raw, ""); strings.Contains(l, followTask) || strings.Contains(l, closedTask) {
			t.Fatalf("%s's tasks/list: %s", who, l)
		}
		// This session idles out: the reaper has run past the bound by the time it is gone.
		waitProcLog(t, gateway, "an idle session", "session "+sid[:8]+" idle for 6s: closed")
	}
	// The session whose client dropped its connections without a DELETE idles out as any: its
	// task holds nothing in its server, and stops following (before 2026-12-07 it kept the
	// session open until the first execution ended: TestKilledFollowingClientsFreeTheirSessions).
	waitProcLog(t, gateway, "the dropped client's session", "session "+closedRep.Session[:8]+" idle for 6s: closed")
	waitProcLog(t, gateway, "the dropped client's follower", "task "+closedTask+" stopped following")

	first.stdin.Close() // the first agent answers; the first execution ends
	if rep := first.report(); rep.Error != nil || !strings.Contains(rep.Text, "Research Report: "+topic) || rep.Replayed {
		t.Fatalf("the first agent: %+v", rep)
	}
	rep := follow.report()
	if rep.Error != nil || rep.TaskID != followTask || len(rep.Statuses) == 0 || rep.Statuses[0] != "working" || !rep.Replayed || !strings.Contains(rep.Text, "Research Report: "+topic) {
		t.Fatalf("what the SDK handed the following agent: %+v", rep)
	}
	if n := strings.Count(gateway.log.String(), "runs as task"); n != 1 {
		t.Fatalf("the call ran %d times, want 1:\n%s", n, gateway.log.String())
	}
	if strings.Contains(gateway.log.String(), "DATA RACE") {
		t.Fatal("a data race")
	}
}
