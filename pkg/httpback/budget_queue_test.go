package httpback

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// TestQueuedNotificationsHoldTheBudget: large notifications read from a stream and
// queued for delivery are held in memory until OnNotification has them, so they must keep
// their share of AnswerBudget until then (as mcpstdio's do). Here delivery is stuck on the
// first of ten 1.5 MiB notifications while the budget is 4 MiB: the reader must not queue
// more than the budget covers.
func TestQueuedNotificationsHoldTheBudget(t *testing.T) {
	oldBudget, oldMax := answers, maxMessage
	answers, maxMessage = budget.NewPool(4<<20), 2<<20
	t.Cleanup(func() { answers, maxMessage = oldBudget, oldMax })
	const n, size = 10, 3 << 19
	f, srv := newFake(t)
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		pad := strings.Repeat("p", size)
		for range n {
			writeEvent(w, "", jsonrpc.Notification("notifications/message", json.RawMessage(`{"level":"info","data":"`+pad+`"}`)))
		}
		<-r.Context().Done()
	}
	stuck := make(chan struct{})
	u := upstream(t, srv.URL, Config{OnNotification: func(string, json.RawMessage) { <-stuck }})
	t.Cleanup(func() { close(stuck) }) // runs before the upstream's Kill
	s := session(t, u)
	// Wait until all but the one being delivered are queued (so it went before the fix), or
	// long enough that the reader must be waiting for room in the budget (so it goes with it).
	queued := 0
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline) && queued < n-1; queued = len(s.notes) {
		time.Sleep(50 * time.Millisecond)
	}
	now, _ := answers.Used()
	t.Logf("queued %d, used %d", queued, now)
	// Each message counts what was read for it: up to a read-ahead buffer (64 KiB) less.
	if held := int64(queued) * size; int64(queued)*(size-64<<10) > now {
		t.Fatalf("%d notifications of %d bytes wait for delivery (%d MiB in memory), but only %d bytes of the %d MiB budget are taken", queued, size, held>>20, now, answers.Total()>>20)
	}
}
