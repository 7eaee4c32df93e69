package wrap_test

import (
	"encoding/json"
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
// The process stopped whole under load (a CI run): a garbage collection's stop-the-world
// waited for the thread in the page fault on the frozen -shm. The store now waits for a
// frozen file system in a system call (waitWritable); the agent's requests meanwhile, with
// GOGC=1, make the process collect while the claim is stuck.
func TestClaimOnAFrozenDiskIsAnswered(t *testing.T) {
	t.Parallel()
	r, rw, before, freeze := frozenWarmWrap(t)

	thaw := freeze()
	rw.refusedWhilePinged(t, 2, chargeLine(2, "frozen"), thaw, "its claim written to a frozen disk")
	if n := r.effectCount(); n != before {
		t.Fatalf("%d effects after the refused call, want %d: it ran", n, before)
	}

	// The disk answers again: the retry the agent was told it may send runs the call, once.
	thawed := time.Now()
	var got string
	id := 3
	for deadline := time.Now().Add(time.Minute); ; id++ {
		got = rw.roundTrip(t, chargeLine(id, "frozen"))
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
	if got := rw.roundTrip(t, chargeLine(id+1, "frozen")); !strings.Contains(got, `"effectfence/replayed":true`) {
		t.Fatalf("a duplicate of the retry that ran: %s; want it replayed", got)
	}
}

// TestDuplicateOnAFrozenDiskIsAnswered: a duplicate of a call that ran, sent while the
// ledger's file system is frozen, reads the ledger, and a read takes a read mark in SQLite's
// shared-memory index: a store into the frozen -shm, which waited in a page fault where the
// next garbage collection stopped the whole process until the thaw (45 of 400 of the agent's
// requests answered, none after the first 4.5 s of the freeze, the duplicate not in 40 s).
// Reads now wait for a frozen file system in a system call, as the writer does: the duplicate
// is answered store_error (NOT executed) while the disk is frozen, the agent's other requests
// meanwhile, and once the disk thaws the duplicate is replayed, the call still run once.
func TestDuplicateOnAFrozenDiskIsAnswered(t *testing.T) {
	t.Parallel()
	r, rw, before, freeze := frozenWarmWrap(t)

	thaw := freeze()
	rw.refusedWhilePinged(t, 2, chargeLine(2, "warm"), thaw, "a duplicate read from a frozen disk")
	if got := rw.roundTrip(t, chargeLine(3, "warm")); !strings.Contains(got, `"effectfence/replayed":true`) {
		t.Fatalf("the duplicate once the disk thawed: %s; want it replayed", got)
	}
	if n := r.effectCount(); n != before {
		t.Fatalf("%d effects, want %d: the duplicate ran", n, before)
	}
}

// frozenWarmWrap is a warm wrap (warmWrap) on a SQLite ledger in a file system of the test's
// own, and freeze, which freezes it. A collection on nearly every allocation (GOGC=1): the
// agent's requests make wrap collect while its ledger work is stuck, as load did in CI (pings
// alone allocate too little to).
func frozenWarmWrap(t *testing.T) (r *rig, rw *rawWrap, effects int, freeze func() (thaw func())) {
	t.Helper()
	dir, freeze := diskfull.Frozen(t)
	r = newRig(t)
	r.ledger = filepath.Join(dir, "ledger.db")
	r.extraEnv = append(r.extraEnv, "GOGC=1")
	rw, effects = r.warmWrap(t, "--lease-secs", "3", "--wait", "2s")
	return r, rw, effects, freeze
}

// refusedWhilePinged is refusedWhileHeld for the call line of JSON-RPC id id, with the agent
// sending a tools/list every 100 ms while it waits (its other requests: work for wrap, and
// for its garbage collector, while the claim is held up); the call must be answered within
// 40 s, NOT executed (store_error), and every tools/list too ("pings" below).
func (rw *rawWrap) refusedWhilePinged(t *testing.T, id int, line string, undo func(), held string) {
	t.Helper()
	defer undo()
	rw.send(t, line)
	sent := time.Now()
	type read struct {
		line string
		at   time.Time
	}
	lines := make(chan read, 1000)
	// The number of pings sent, once the call is answered or waited for no longer: the reader
	// reads their answers, so that wrap, which answers them all once the disk thaws, does not
	// stop on a full stdout and its cleanup waits for it to exit.
	pings := make(chan int, 1)
	go func() {
		defer close(lines)
		want, pongs := -1, 0
		for want < 0 || pongs < want {
			got, err := rw.out.ReadString('\n')
			if err != nil {
				return
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			_ = json.Unmarshal([]byte(got), &m)
			if string(m.ID) == fmt.Sprint(id) {
				lines <- read{got, time.Now()}
				want = <-pings
			} else {
				pongs++
				lines <- read{"", time.Now()}
			}
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(40 * time.Second)
	var pinged, ponged int
	lastPong := sent
	for {
		select {
		case <-tick.C:
			pinged++
			rw.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":"list%d","method":"tools/list"}`, pinged))
			continue
		case r, ok := <-lines:
			if !ok {
				t.Fatalf("wrap's output ended, %s", held)
			}
			if r.line == "" {
				ponged++
				lastPong = r.at
				continue
			}
			tick.Stop()
			pings <- pinged
			t.Logf("answered %s after the call, %s; %d of %d pings answered by then, the last %s after the call",
				r.at.Sub(sent).Round(100*time.Millisecond), held, ponged, pinged, lastPong.Sub(sent).Round(100*time.Millisecond))
			for _, want := range []string{`"isError":true`, `"effectfence/code":"store_error"`, "NOT executed"} {
				if !strings.Contains(r.line, want) {
					t.Fatalf("the call, %s: %s; want %s in it", held, r.line, want)
				}
			}
			for range lines { // the pings' answers still to come; closed once all came
				ponged++
			}
			if ponged != pinged {
				t.Fatalf("%d of %d pings answered", ponged, pinged)
			}
			return
		case <-timeout:
			pings <- pinged
			t.Fatalf("no answer 40 s after the call, %s; %d of %d pings answered, the last %s after the call",
				held, ponged, pinged, lastPong.Sub(sent).Round(100*time.Millisecond))
		}
	}
}
