package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
)

// TestPersonIsNotAskedWhileTheLeaseHolds: after wrap is killed mid-call, the claim is unknown
// but its lease runs, and until it lapses "it did not happen" cannot be recorded. wrap asked
// the person all the same, offering "It did not happen: run it now, once"; the answer was
// refused and nothing ran. It must ask nobody until the lease lapses, and then ask, and run
// the call once on "did not happen". On PostgreSQL the lease runs by the database's clock,
// as Resolve judges it: with that clock a day behind this host's, the person must not be asked
// (by this host's clock the lease had lapsed a day ago); a day ahead, the person is asked once
// the lease lapses by the database's clock, though this host's says it runs for a day.
func TestPersonIsNotAskedWhileTheLeaseHolds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		shift time.Duration // of the database's clock (PostgreSQL); 0: a SQLite ledger
		lease string        // the first wrap's --lease-secs
		wait  bool          // whether the test waits for the lease to lapse (by the ledger's clock) and asks again
	}{
		// 10 s: with 3 a loaded CI run started the second wrap and sent its call after the
		// lease had lapsed, and the person was rightly asked.
		{"sqlite", 0, "10", true},
		{"postgres-behind", -24 * time.Hour, "3600", false},
		{"postgres-ahead", 24 * time.Hour, "10", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			personAskedAfterTheLease(t, c.shift, c.lease, c.wait)
		})
	}
}

func personAskedAfterTheLease(t *testing.T, shift time.Duration, lease string, wait bool) {
	bin := effectfence(t)
	dir := t.TempDir()
	ledgerPath, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")
	if shift != 0 {
		ledgerPath = pgLedgerWithClock(t, shift)
	}
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`

	first, in, _ := startWrapSession(t, dir, "--ledger", ledgerPath, "--scope", "elicit", "--lease-secs", lease, "--", bin, "demo-server", "--latency", "1m", "--effects", effects)
	fmt.Fprintf(in, call+"\n", 2)
	claim := waitOneClaim(t, ledgerPath)
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if shift != 0 {
		// As in killedWrapRefusal: the lease must be the database's time, or the case proves
		// nothing.
		if off := time.Until(claim.LeaseUntil); shift < 0 && off > shift/2 || shift > 0 && off < shift/2 {
			t.Fatalf("the claim's lease ends %s from now: the database's clock, shifted by %s, is not the one the store read", off, shift)
		}
	}

	cmd := exec.Command(bin, "wrap", "--ledger", ledgerPath, "--scope", "elicit", "--", bin, "demo-server", "--latency", "0s", "--effects", effects)
	cmd.Dir = dir
	in, sc := startLines(t, cmd)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"person","version":"1"}}}`)
	if !sc.Scan() {
		t.Fatal("no answer to initialize")
	}
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// ask sends the call and answers every question "did not happen": it returns the tool
	// result's text and _meta and how many questions were asked.
	ask := func(w io.Writer, id int) (string, map[string]any, int) {
		t.Helper()
		fmt.Fprintf(w, call+"\n", id)
		asked := 0
		for sc.Scan() {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%v: %s", err, sc.Text())
			}
			if m.Method == "elicitation/create" {
				asked++
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"outcome":"did_not_happen"}}}`+"\n", m.ID)
				continue
			}
			if string(m.ID) == fmt.Sprint(id) {
				text, meta := toolText(t, sc.Bytes())
				return text, meta, asked
			}
		}
		t.Fatal("wrap ended")
		return "", nil, 0
	}

	now := time.Now
	if shift != 0 {
		now = func() time.Time { return dbNow(t, ledgerPath) }
	}
	if sent := now(); !sent.Before(claim.LeaseUntil) {
		t.Fatalf("the call is sent at %s, after the lease lapsed at %s (by the ledger's clock): too slow to test what happens within it", sent.Format(time.StampMilli), claim.LeaseUntil.Format(time.StampMilli))
	}
	text, meta, asked := ask(in, 2)
	if asked != 0 || meta["effectfence/code"] != fence.CodePriorFailure {
		t.Fatalf("within the lease: %d question(s), answer %v: %s", asked, meta["effectfence/code"], text)
	}
	if !wait {
		return
	}
	for !now().After(claim.LeaseUntil) { // the lease lapses by the ledger's clock
		time.Sleep(50 * time.Millisecond)
	}
	text, meta, asked = ask(in, 3)
	if asked != 1 || meta["effectfence/code"] != nil {
		t.Fatalf("past the lease: %d question(s), answer %v: %s", asked, meta["effectfence/code"], text)
	}
	_, showOut, _ := runCLI(t, "", "ledger", "show", claim.Intent, "--ledger", ledgerPath, "--json")
	var d ledger.Detail
	if json.Unmarshal([]byte(showOut), &d) != nil || d.Record.State != fence.StateDone {
		t.Fatalf("after the person's answer the call did not run once: %s", showOut)
	}
}
