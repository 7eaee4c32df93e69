package httpfront_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sdkStep is one line reuse_client.mjs prints.
type sdkStep struct {
	Session string `json:"session"`
	I       *int   `json:"i"`
	Text    string `json:"text"`
	Error   string `json:"error"`
}

// runReuseClient starts testdata/reuse_client.mjs against url (joining session sid unless it
// is ""), calling calls in turn; each line it prints goes to steps. The client is killed at
// the end of the test if it is still running.
func runReuseClient(t *testing.T, peers, url, sid, calls string) (steps <-chan sdkStep, node *exec.Cmd) {
	t.Helper()
	node = exec.Command("node", filepath.Join("testdata", "reuse_client.mjs"))
	node.Env = append(os.Environ(), "PEERS="+peers, "URL="+url, "SID="+sid, "CALLS="+calls)
	out, err := node.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &logBuf{}
	node.Stderr = stderr
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan sdkStep, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var s sdkStep
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				ch <- s
			}
		}
	}()
	t.Cleanup(func() {
		_ = node.Process.Kill()
		_ = node.Wait()
		if t.Failed() {
			t.Logf("node client's stderr:\n%s", stderr.String())
		}
	})
	return ch, node
}

func nextStep(t *testing.T, steps <-chan sdkStep, who string) sdkStep {
	t.Helper()
	select {
	case s, ok := <-steps:
		if !ok {
			t.Fatalf("%s ended before its next step", who)
		}
		return s
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: no step within 2 minutes", who)
	}
	return sdkStep{}
}

// TestRestartedSDKClientReusesIDs: the real TypeScript SDK client numbers its requests from 0
// in each process, so a client restarted into its session (it skips initialize) sends ids the
// dead one used, while the dead one's call (id 1) is still served. Each request gets its own
// answer or a clear refusal, never another's: its id 0 is answered; its id 1, another call, is
// refused while the dead one's id 1 runs (nothing of it runs); its id 2, the dead one's call
// again, gets that call's one execution. A client of another session, whose id 1 is also
// taken in the first, is served its own answer meanwhile.
func TestRestartedSDKClientReusesIDs(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	if _, err := os.Stat(filepath.Join(peers, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
		t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	g := newGW(t, nil)
	gate := filepath.Join(t.TempDir(), "gate")
	held := `{"name":"slow","arguments":{"tag":"first","until":` + jsonString(gate) + `}}`

	// The first client: initialize (id 0), then the call (id 1), held until the gate opens.
	first, firstNode := runReuseClient(t, peers, g.url, "", "["+held+"]")
	sid := nextStep(t, first, "the first client").Session
	if sid == "" {
		t.Fatal("the first client printed no session")
	}
	waitLog(t, g, "slow tag=first started")
	_ = firstNode.Process.Kill() // kill -9: its POST's connection ends with it
	_ = firstNode.Wait()

	// Another session's client: its id 1 is its own.
	other, _ := runReuseClient(t, peers, g.url, "", `[{"name":"echo","arguments":{"text":"other session"}}]`)
	if s := nextStep(t, other, "the other session's client"); s.Session == "" || s.Session == sid {
		t.Fatalf("the other client's session %q, the first's %q: want a new one", s.Session, sid)
	}
	if s := nextStep(t, other, "the other session's client"); s.Error != "" || s.Text != "echo other session" {
		t.Fatalf("the other session's id 1 while the first session's id 1 runs: %+v, want its own answer", s)
	}

	// The restarted client, in the first session: ids 0, 1 and 2.
	again, _ := runReuseClient(t, peers, g.url, sid, `[{"name":"echo","arguments":{"text":"zero"}},`+
		`{"name":"slow","arguments":{"tag":"second","ms":1}},`+held+`]`)
	if s := nextStep(t, again, "the restarted client"); s.Session != sid {
		t.Fatalf("the restarted client joined session %q, want %q", s.Session, sid)
	}
	if s := nextStep(t, again, "the restarted client"); s.Error != "" || s.Text != "echo zero" {
		t.Fatalf("the restarted client's id 0: %+v, want its own answer", s)
	}
	if s := nextStep(t, again, "the restarted client"); !strings.Contains(s.Error, "already in progress") {
		t.Fatalf("the restarted client's id 1, another call than the dead client's id 1 still served: %+v, want it refused (already in progress)", s)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil { // the dead client's call may end
		t.Fatal(err)
	}
	s := nextStep(t, again, "the restarted client")
	if s.Error != "" || !strings.HasPrefix(s.Text, "slow done n=1 ") {
		t.Fatalf("the restarted client's id 2, the dead client's call again: %+v, want its one execution's answer", s)
	}
	log := g.log.String()
	if n := strings.Count(log, "slow tag=first started"); n != 1 {
		t.Fatalf("the held call started %d times, want 1", n)
	}
	if strings.Contains(log, "slow tag=second started") {
		t.Fatal("the refused call ran")
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
