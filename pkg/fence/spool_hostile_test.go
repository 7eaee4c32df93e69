package fence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestSpoolKeepsExactResults: an outcome kept in the spool is drained with its result byte
// for byte, however it is spelled or nested. (A result nested 10,000 levels, valid alone,
// made its spool file, where it sits one level down, too deep for encoding/json: the drain
// reported the file as not an outcome, and the effect's outcome stayed unrecorded.)
func TestSpoolKeepsExactResults(t *testing.T) {
	deep := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	results := [][]byte{
		[]byte(`{ "a" : "<b>&\u2028" }`),
		[]byte("\"\xff\\ud800\"\n"),
		[]byte(`{"a":1,"a":2}`),
		deep(9998), deep(9999), deep(10000),
		[]byte(strings.Repeat("[ ", 10000) + strings.Repeat(" ]", 10000)),
	}
	var s spool
	dir := t.TempDir()
	for i, res := range results {
		o := Outcome{Kind: OutcomeCommit, Ticket: Ticket{Intent: fmt.Sprintf("spool:%d", i), Token: uint64(i + 1)}, Result: res}
		if _, err := s.put(dir, o); err != nil {
			t.Fatalf("result %d (%.40s): spool: %v", i, res, err)
		}
	}
	got := map[string][]byte{}
	n, err := s.drain(context.Background(), dir, func(o Outcome) error {
		got[o.Ticket.Intent] = o.Result
		return nil
	})
	if err != nil || n != len(results) {
		t.Fatalf("drained %d of %d: %.300v", n, len(results), err)
	}
	for i, res := range results {
		if g := got[fmt.Sprintf("spool:%d", i)]; !bytes.Equal(g, res) {
			t.Errorf("result %d drained as %.60q, want %.60q", i, g, res)
		}
	}
}

// DrainedFor drains only for a refused intent whose outcome waits here (in the spool
// directory or held in memory): a refusal of any other kind, or of an intent with nothing
// waiting, leaves the spool alone. An intent refused as unknown with nothing waiting is asked
// again only if its record is no longer unknown (here there is none: the ledger never held a).
func TestDrainedForOnlyWhatWaits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := New(NewMemoryStore(), Config{SpoolDir: dir})
	other := Outcome{Kind: OutcomeRelease, Ticket: Ticket{Intent: "b", Token: 7}, Reason: "r"}
	if _, err := e.spool.put(dir, other); err != nil {
		t.Fatal(err)
	}
	unknown := func(intent string) error { return PriorFailureError{Intent: intent, State: StateUnknown} }
	for _, c := range []struct {
		err   error
		again bool
	}{
		{unknown("a"), true}, // no record of a: cleared since, as far as DrainedFor can tell
		{PriorFailureError{Intent: "a", State: StateFailed}, false},
		{InFlightError{Intent: "b"}, false},
		{errors.New("b"), false},
	} {
		if again, derr := e.DrainedFor(ctx, c.err); again != c.again || derr != nil {
			t.Fatalf("DrainedFor(%v) = %v, %v; want %v and no drain", c.err, again, derr, c.again)
		}
	}
	if files, _ := SpoolFiles(dir); len(files) != 1 {
		t.Fatalf("the spool holds %v; want the outcome of b still there", files)
	}
	if !e.spool.hold(Outcome{Kind: OutcomeRelease, Ticket: Ticket{Intent: "a", Token: 3}, Reason: "r"}) {
		t.Fatal("no room to hold")
	}
	// a's outcome held in memory: it and the spool's are reported to the ledger (each as a
	// coded refusal, since the memory store never issued those tickets), which counts.
	if drained, derr := e.DrainedFor(ctx, unknown("a")); !drained || derr != nil {
		t.Fatalf("DrainedFor with a's outcome held = %v, %v; want a drain", drained, derr)
	}
	if e.spool.holds("a") {
		t.Fatal("a's outcome is still held after the drain")
	}
}
