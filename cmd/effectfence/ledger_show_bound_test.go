package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerShowBoundsItsAuditTrail: an intent cleared 120 times has 120 audit events; `ledger
// show` prints the last 50 (showEvents), oldest first, and a line that says how many older
// ones it left out and that --events 0 shows every one; --events N shows the last N, --events
// 0 all; --json carries the same events and events_left_out. Before, show printed every event
// of an intent, however many (docs/ledger.md).
func TestLedgerShowBoundsItsAuditTrail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	const total = 120
	for i := range total {
		if _, err := l.Prepare(ctx, fence.Request{Intent: "loop:1", Tool: "t", Args: []byte(`{}`), Agent: "a"}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Clear(ctx, "loop:1", "tester", fmt.Sprintf("round-%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rounds := func(s string) []string {
		var out []string
		for _, line := range strings.Split(s, "\n") {
			if i := strings.Index(line, "round-"); i >= 0 {
				out = append(out, line[i:i+9])
			}
		}
		return out
	}
	code, out, errOut := runCLI(t, "", "ledger", "show", "loop:1", "--ledger", path)
	got := rounds(out)
	if code != exitOK || len(got) != showEvents || got[0] != "round-070" || got[len(got)-1] != "round-119" ||
		!strings.Contains(out, "the last 50 of 120 events; 70 older left out: --events 0 shows every one") {
		t.Errorf("show: exit %d, %d events %v\n%s%s", code, len(got), got, out, errOut)
	}
	for _, tc := range []struct {
		flag  string
		n     int
		first string
	}{{"7", 7, "round-113"}, {"0", total, "round-000"}, {"500", total, "round-000"}} {
		code, out, errOut := runCLI(t, "", "ledger", "show", "loop:1", "--events", tc.flag, "--ledger", path)
		got := rounds(out)
		if code != exitOK || len(got) != tc.n || got[0] != tc.first || (tc.n == total) == strings.Contains(out, "left out") {
			t.Errorf("show --events %s: exit %d, %d events %v\n%s%s", tc.flag, code, len(got), got, out, errOut)
		}
	}
	code, out, errOut = runCLI(t, "", "ledger", "show", "loop:1", "--json", "--ledger", path)
	var d struct {
		Events []fence.Event `json:"events"`
		Left   int           `json:"events_left_out"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil || len(d.Events) != showEvents || d.Left != total-showEvents || d.Events[0].Reason != "round-070" {
		t.Errorf("show --json: exit %d, %d events, %d left out\n%s", code, len(d.Events), d.Left, errOut)
	}
	if code, _, errOut := runCLI(t, "", "ledger", "show", "loop:1", "--events", "-1", "--ledger", path); code != exitUsage {
		t.Errorf("show --events -1: exit %d %s", code, errOut)
	}
	// A usage error is told before the ledger is opened (an open recovers and sweeps): of a
	// ledger that is not there, the usage, not its absence (before 2026-12-07, its absence).
	if code, _, errOut := runCLI(t, "", "ledger", "show", "loop:1", "--events", "-1", "--ledger", path+".missing"); code != exitUsage || !strings.Contains(errOut, "--events -1") {
		t.Errorf("show --events -1 of a missing ledger: exit %d %s", code, errOut)
	}
}
