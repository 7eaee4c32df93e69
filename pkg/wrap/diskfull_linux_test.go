package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/diskfull"
)

// TestFullDiskLosesNothing: wrap's SQLite ledger on a disk that fills (a real tmpfs). A call
// whose claim cannot be written is not sent, and says why; a call whose outcome cannot be
// written once it ran waits, and is answered once the disk has room and the outcome is
// recorded; its duplicate replays it. The tool runs once per call whatever the disk does.
func TestFullDiskLosesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	disk := diskfull.Mount(t, 8<<20)
	r.ledger = filepath.Join(disk, "ledger.db")
	w := r.wrap()

	filler := diskfull.Fill(t, disk)
	x := call(t, w.Session, "charge", `{"amount":100,"order":"full-at-claim"}`)
	if !x.IsError || !strings.Contains(x.text(), "NOT executed") || r.effectCount() != 0 {
		t.Fatalf("a call on a full disk: %s (isError %v), %d executions; want it refused, not executed", x.text(), x.IsError, r.effectCount())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if x := call(t, w.Session, "charge", `{"amount":100,"order":"full-at-claim"}`); x.IsError || r.effectCount() != 1 {
		t.Fatalf("the same call once the disk had room: %s, %d executions; want it run once", x.text(), r.effectCount())
	}

	// The disk fills while a call runs: its outcome cannot be recorded until there is room.
	type answer struct {
		x   result
		err error
	}
	got := make(chan answer, 1)
	args := `{"ms":1500,"tag":"full-at-outcome"}`
	go func() {
		x, err := callE(w.Session, "slow", args)
		got <- answer{x, err}
	}()
	waitFor(t, "the slow call to start", func() bool { return strings.Contains(w.log.String(), "mcptest: slow tag=full-at-outcome started") })
	filler = diskfull.Fill(t, disk)
	waitFor(t, "the slow call to end", func() bool { return r.effectCount() == 2 })
	select {
	case a := <-got:
		t.Fatalf("answered while its outcome could not be recorded: %s, %v", a.x.text(), a.err)
	case <-time.After(time.Second):
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil || a.x.IsError || !strings.Contains(a.x.text(), "slow done") {
		t.Fatalf("the slow call once the disk had room: %s, %v", a.x.text(), a.err)
	}
	again := call(t, w.Session, "slow", args)
	if !again.replayed() || again.same() != a.x.same() || r.effectCount() != 2 {
		t.Fatalf("its duplicate: replayed %v, %s; %d executions; want the recorded result and 2", again.replayed(), again.text(), r.effectCount())
	}
}
