package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServePrepareOnAFrozenDiskIsAnswered: docs/serve.md says a fence_prepare the ledger does
// not answer is answered store_error once its bound has passed (35 s past wait_secs). A
// SQLite ledger whose file system is frozen (fsfreeze, as backup and snapshot tools do; a
// network disk that hangs) blocks the claim's write inside the kernel, where no context
// reaches it: before, the prepare was answered only once the disk thawed (not within the
// minute watched here), its worker held meanwhile. Now it is answered store_error (not
// admitted) while the disk is still frozen, and once the disk thaws the intent is admitted
// when asked again.
// The process stopped whole under load (a CI run): a garbage collection's stop-the-world
// waited for the thread in the page fault on the frozen -shm. The store now waits for a
// frozen file system in a system call (waitWritable); the agent's requests meanwhile, with
// GOGC=1, make the process collect while the claim is stuck.
func TestServePrepareOnAFrozenDiskIsAnswered(t *testing.T) {
	t.Parallel()
	dir, freeze := diskfull.Frozen(t)
	// A collection on nearly every allocation: the pings below make serve collect while the
	// prepare's claim is stuck, as load did in CI.
	a := startServeEnv(t, []string{"GOGC=1"}, "--ledger", filepath.Join(dir, "ledger.db"))
	if p := a.prepare(`{"intent":"warm","tool":"t"}`); p.Status != serve.StatusFresh {
		t.Fatalf("warm-up prepare: %+v", p)
	}
	const prep = `{"intent":"charge:frozen-disk","tool":"charge","args":{"amount":5}}`
	thaw := freeze()
	type answer struct {
		raw   json.RawMessage
		isErr bool
	}
	got := make(chan answer, 1)
	sent := time.Now()
	go func() {
		raw, isErr := a.call(serve.ToolPrepare, prep)
		got <- answer{raw, isErr}
	}()
	// The agent pings meanwhile (call skips their answers): work for serve, and for its
	// garbage collector, while the claim is held up.
	stopPings, pinged := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pinged)
		for n := 1; ; n++ {
			select {
			case <-stopPings:
				return
			case <-time.After(200 * time.Millisecond):
			}
			_, _ = fmt.Fprintf(a.in, `{"jsonrpc":"2.0","id":"ping%d","method":"ping"}`+"\n", n)
		}
	}()
	var ans answer
	select {
	case ans = <-got:
		close(stopPings)
		<-pinged
	case <-time.After(time.Minute):
		close(stopPings)
		<-pinged
		thaw()
		<-got
		t.Fatalf("fence_prepare on a frozen disk: no answer a minute after it was sent (answered only once the disk thawed); stderr:\n%s", a.stderr.String())
	}
	t.Logf("answered %s after it was sent, the disk still frozen", time.Since(sent).Round(100*time.Millisecond))
	thaw()
	var r serve.Refusal
	if !ans.isErr || json.Unmarshal(ans.raw, &r) != nil || r.Code != fence.CodeStore {
		t.Fatalf("fence_prepare on a frozen disk: %s; want store_error", ans.raw)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, isErr := a.call(serve.ToolPrepare, prep)
		var p serve.PrepareResult
		if !isErr && json.Unmarshal(raw, &p) == nil && p.Status == serve.StatusFresh {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fence_prepare 30 s after the disk thawed: %s; want fresh (nothing was claimed for the refused prepare)", raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
