package wrap_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// The real TypeScript SDK client, declaring elicitation, meets calls made unknown by killing
// the MCP server mid-call; each answer to wrap's elicitation leads to the documented state in
// the ledger, answer to the agent and audit event. A client without elicitation gets today's
// refusal.
func TestElicitationWithRealSDKClient(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	if _, err := os.Stat(filepath.Join(peers, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
		t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	if _, err := exec.LookPath("pgrep"); err != nil {
		t.Skip("skipping: pgrep is not installed (the script finds the server to kill with it)")
	}
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	child, _ := json.Marshal(r.childCmd())
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "elicit_client.mjs"))
	node.Env = append(append(os.Environ(), r.env()...), "PEERS="+peers, "EF_BIN="+efBin, "EF_LEDGER="+r.ledger, "CHILD="+string(child))
	var stderr logBuf
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Fatalf("race in the wrap process:\n%s", stderr.String())
	}
	type res struct {
		IsError  bool   `json:"isError"`
		Text     string `json:"text"`
		Code     string `json:"code"`
		Replayed bool   `json:"replayed"`
		Cert     string `json:"cert"`
		Intent   string `json:"intent"`
		Error    string `json:"error"`
	}
	type scenario struct {
		First, Retry, Twin, Again res
		Asked                     []struct {
			Message         string          `json:"message"`
			RequestedSchema json.RawMessage `json:"requestedSchema"`
		}
	}
	var rep struct {
		Scenarios map[string]scenario
		Plain     struct{ First, Retry res }
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %s: %v", out, err)
	}
	led := r.openLedger()
	events := func(intent string) (kinds []string, resolves []fence.Event) {
		err := led.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Events(intent, func(ev fence.Event) bool {
				kinds = append(kinds, ev.Kind)
				if strings.HasPrefix(ev.Kind, "resolve_") {
					resolves = append(resolves, ev)
				}
				return true
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return kinds, resolves
	}
	effects := func(tag string) int {
		n := 0
		for _, e := range mcptest.Effects(r.effects) {
			if strings.HasPrefix(e, "slow tag=s3cret-"+tag+" ") {
				n++
			}
		}
		return n
	}
	const who = "person in the conversation via elicitation:effectfence-elicit-e2e 2.5.0"
	for name, want := range map[string]struct {
		state  fence.State
		kinds  string
		asked  int
		runs   int
		refuse bool
	}{
		"happened":       {fence.StateDone, "lost,resolve_happened", 1, 0, false},
		"did_not_happen": {fence.StateDone, "lost,resolve_did_not_happen", 1, 1, false},
		"leave_fenced":   {fence.StateUnknown, "lost,resolve_leave_fenced", 1, 0, true},
		"decline":        {fence.StateUnknown, "lost", 1, 0, true},
		// Dismissed: asked again by the next call. The twin shares the retry's question when
		// it arrives while that question is open; on a loaded machine it can arrive after the
		// dismissal and ask again itself (3).
		"cancel": {fence.StateUnknown, "lost", 2, 0, true},
	} {
		sc, ok := rep.Scenarios[name]
		if !ok {
			t.Fatalf("%s: no report", name)
		}
		if !sc.First.IsError || sc.First.Code != fence.CodePriorFailure || sc.First.Intent == "" {
			t.Fatalf("%s: the killed call must be answered unknown: %+v", name, sc.First)
		}
		intent := sc.First.Intent
		if n := len(sc.Asked); n != want.asked && !(name == "cancel" && n == 3) {
			t.Fatalf("%s: asked %d times, want %d: %+v", name, len(sc.Asked), want.asked, sc.Asked)
		}
		msg := sc.Asked[0].Message
		if !strings.Contains(msg, `"slow"`) || !strings.Contains(msg, "tag: [redacted]") || strings.Contains(msg, "s3cret") ||
			!strings.Contains(msg, "Why unknown: the MCP server died") || !strings.Contains(msg, "When: ") || !strings.Contains(string(sc.Asked[0].RequestedSchema), `"did_not_happen"`) {
			t.Fatalf("%s: elicitation message:\n%s\n%s", name, msg, sc.Asked[0].RequestedSchema)
		}
		st, err := led.Status(context.Background(), intent)
		if err != nil || st.State != want.state {
			t.Fatalf("%s: ledger state %s, %v; want %s", name, st.State, err, want.state)
		}
		kinds, resolves := events(intent)
		if strings.Join(kinds, ",") != want.kinds {
			t.Fatalf("%s: events %v, want %s", name, kinds, want.kinds)
		}
		for _, ev := range resolves {
			if ev.Who != who || ev.State != fence.StateUnknown {
				t.Fatalf("%s: audit event %+v; want who %q", name, ev, who)
			}
		}
		if n := effects(name); n != want.runs {
			t.Fatalf("%s: the tool ran %d times after the kill, want %d", name, n, want.runs)
		}
		// Of the two concurrent retries, one asked and the other waited for its answer.
		retry, twin := sc.Retry, sc.Twin
		if retry.Replayed && !twin.Replayed {
			retry, twin = twin, retry
		}
		if name == "did_not_happen" && (!twin.Replayed || twin.Cert != st.Cert.Hash) {
			t.Fatalf("did_not_happen: the concurrent duplicate must receive the one run's result: %+v", twin)
		}
		for i, a := range []res{retry, sc.Again, twin} {
			if i == 2 && name == "did_not_happen" {
				continue // checked above
			}
			switch {
			case want.refuse:
				if !a.IsError || a.Code != fence.CodePriorFailure || !strings.Contains(a.Text, "effectfence ledger resolve") || !strings.Contains(a.Text, "effectfence ledger clear") {
					t.Fatalf("%s: answer %d must be today's refusal with the commands: %+v", name, i, a)
				}
			case name == "happened":
				if a.IsError || !a.Replayed || !strings.Contains(a.Text, "Reference: ch_42") || !strings.Contains(a.Text, "confirmed") || a.Cert != st.Cert.Hash {
					t.Fatalf("happened: answer %d must replay the confirmed result: %+v", i, a)
				}
			case i == 0:
				if a.IsError || a.Replayed || !strings.Contains(a.Text, "slow done") {
					t.Fatalf("did_not_happen: the retry must run the call: %+v", a)
				}
			default:
				if !a.Replayed || a.Cert != st.Cert.Hash {
					t.Fatalf("did_not_happen: the next retry must replay the run: %+v", a)
				}
			}
		}
	}
	p := rep.Plain
	if !p.First.IsError || p.First.Code != fence.CodePriorFailure || !p.Retry.IsError || p.Retry.Code != fence.CodePriorFailure ||
		!strings.Contains(p.Retry.Text, "NOT executed again") || !strings.Contains(p.Retry.Text, "effectfence ledger resolve") {
		t.Fatalf("a client without elicitation must get today's refusal: %+v", p)
	}
	if st, _ := led.Status(context.Background(), p.First.Intent); st.State != fence.StateUnknown {
		t.Fatalf("without elicitation the intent must stay unknown: %s", st.State)
	}
}
