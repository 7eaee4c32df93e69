package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestElicitedHappenedSaysItsReplayWindow: the person asked about an unknown outcome was
// offered "It happened: record it as done, do not run it again". wrap records a done outcome
// now, which an identical call replays within the tool's replay window only; after it, the
// call runs as a new action, as after any completed call. With --replay-window 1s the
// question must name that window and what comes after it, offer no "do not run it again",
// and do what it says: the call asked about is answered without running, and an identical
// call past the window runs once (as `ledger resolve --happened` of a wrap intent says since
// TestResolveHappenedOfAWrapIntentSaysItsReplayWindow).
func TestElicitedHappenedSaysItsReplayWindow(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`

	first, in, _ := startWrapSession(t, dir, "--ledger", ledger, "--scope", "window", "--lease-secs", "1", "--", bin, "demo-server", "--latency", "1m", "--effects", filepath.Join(dir, "effects-first"))
	fmt.Fprintf(in, call+"\n", 2)
	claim := waitClaimLong(t, ledger)
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	for !time.Now().After(claim.LeaseUntil) { // the person is asked once the lease lapsed
		time.Sleep(50 * time.Millisecond)
	}

	effects := filepath.Join(dir, "effects")
	cmd := exec.Command(bin, "wrap", "--ledger", ledger, "--scope", "window", "--replay-window", "1s", "--", bin, "demo-server", "--latency", "0s", "--effects", effects)
	cmd.Dir = dir
	in, sc := startLines(t, cmd)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"person","version":"1"}}}`)
	if !sc.Scan() {
		t.Fatal("no answer to initialize")
	}
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	var questions []string
	send := func(id int) (string, map[string]any) {
		t.Helper()
		fmt.Fprintf(in, call+"\n", id)
		for sc.Scan() {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			}
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%v: %s", err, sc.Text())
			}
			if m.Method == "elicitation/create" {
				questions = append(questions, string(m.Params))
				fmt.Fprintf(in, `{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"outcome":"happened","reference":"ch_checked"}}}`+"\n", m.ID)
				continue
			}
			if string(m.ID) == fmt.Sprint(id) {
				return toolText(t, sc.Bytes())
			}
		}
		t.Fatal("wrap ended")
		return "", nil
	}

	text, meta := send(2)
	if len(questions) != 1 || meta["effectfence/code"] != nil || !strings.Contains(text, "ch_checked") {
		t.Fatalf("the call asked about: %d question(s), code %v: %s", len(questions), meta["effectfence/code"], text)
	}
	var q struct {
		Message         string
		RequestedSchema struct {
			Properties struct {
				Outcome struct{ EnumNames []string } `json:"outcome"`
			}
		}
	}
	if err := json.Unmarshal([]byte(questions[0]), &q); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(q.Message, "an identical call within 1s from now is answered the same way, and one after that runs as a new action") {
		t.Errorf("the question does not name the replay window (1s) and what comes after it:\n%s", q.Message)
	}
	for _, name := range q.RequestedSchema.Properties.Outcome.EnumNames {
		if strings.Contains(name, "do not run it again") {
			t.Errorf("the question offers %q, which a call after the replay window belies", name)
		}
	}
	if n := countEffects(t, effects); n != 0 {
		t.Fatalf("the call the person said happened ran (%d executions)", n)
	}

	// As it says: past the window (by the ledger's clock, this host's) the call runs once.
	done := claim
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		r := runBinary(t, nil, "", "ledger", "ls", "--ledger", ledger, "--state", "done", "--json")
		var ls struct{ Records []fence.Record }
		if json.Unmarshal([]byte(r.stdout), &ls) == nil && len(ls.Records) == 1 {
			done = ls.Records[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no done record after the answer: %s%s", r.stdout, r.stderr)
		}
	}
	for !time.Now().After(done.UpdatedAt.Add(time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}
	text, meta = send(3)
	if len(questions) != 1 || meta["effectfence/code"] != nil || strings.Contains(text, "ch_checked") {
		t.Errorf("the identical call after the window: %d question(s), code %v: %s", len(questions), meta["effectfence/code"], text)
	}
	if n := countEffects(t, effects); n != 1 {
		t.Errorf("the identical call after the window ran %d times; want once, as a new action", n)
	}
}

// countEffects is how many executions the demo server recorded in its effects file.
func countEffects(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}
