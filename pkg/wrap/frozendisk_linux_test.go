package wrap_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
)

// TestClaimOnAFrozenDiskIsAnswered: docs/wrap.md says a call whose claim the ledger has not
// confirmed within --wait and the lease is answered store_error, nothing run. A SQLite ledger
// whose file system is frozen (fsfreeze, as backup and snapshot tools do; a network disk that
// hangs) blocks the claim's write inside the kernel, in a page fault on the ledger's index,
// where no context reaches it. Before, the call was answered only once the disk thawed (not
// within the 40 s watched here; 141 s in a manual run, with --wait 2s and a 3 s lease); now
// it is answered store_error (NOT executed) while the disk is still frozen, and once the disk
// thaws the claim, if it was recorded, is released, so a retry runs the call once, and its
// duplicate replays it.
func TestClaimOnAFrozenDiskIsAnswered(t *testing.T) {
	dir, freeze := diskfull.Frozen(t)
	r := newRig(t)
	r.ledger = filepath.Join(dir, "ledger.db")
	rw := r.initializedRawWrap("--lease-secs", "3", "--wait", "2s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("wrap's stderr:\n%s", rw.log.String())
		}
	})
	call := func(id int, order string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1,"order":%q}}}`, id, order)
	}
	if got := rw.roundTrip(t, call(1, "warm")); strings.Contains(got, `"isError":true`) {
		t.Fatalf("the first call: %s", got)
	}
	before := r.effectCount()

	thaw := freeze()
	rw.send(t, call(2, "frozen"))
	sent := time.Now()
	answer := make(chan string, 1)
	go func() {
		line, _ := rw.out.ReadString('\n')
		answer <- line
	}()
	var got string
	select {
	case got = <-answer:
	case <-time.After(40 * time.Second):
		thaw()
		t.Fatalf("no answer 40 s after the call, its claim written to a frozen disk (--wait 2s, lease 3 s)")
	}
	t.Logf("answered %s after the call, the disk still frozen", time.Since(sent).Round(100*time.Millisecond))
	for _, want := range []string{`"isError":true`, `"effectfence/code":"store_error"`, "NOT executed"} {
		if !strings.Contains(got, want) {
			thaw()
			t.Fatalf("the call whose claim the frozen disk holds: %s; want %s in it", got, want)
		}
	}
	thaw()
	if n := r.effectCount(); n != before {
		t.Fatalf("%d effects after the refused call, want %d: it ran", n, before)
	}

	// The disk answers again: the retry the agent was told it may send runs the call, once.
	thawed := time.Now()
	id := 3
	for deadline := time.Now().Add(time.Minute); ; id++ {
		got = rw.roundTrip(t, call(id, "frozen"))
		if !strings.Contains(got, `"isError":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retries still refused a minute after the disk thawed: %s", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("a retry ran %s after the disk thawed, after %d refused", time.Since(thawed).Round(100*time.Millisecond), id-3)
	if n := r.effectCount(); n != before+1 {
		t.Fatalf("%d effects after the retry ran, want %d", n, before+1)
	}
	if got := rw.roundTrip(t, call(id+1, "frozen")); !strings.Contains(got, `"effectfence/replayed":true`) {
		t.Fatalf("a duplicate of the retry that ran: %s; want it replayed", got)
	}
}
