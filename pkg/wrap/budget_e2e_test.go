package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// vmHWM is the peak resident memory of process pid in bytes (0 when /proc does not say).
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}

// concurrently runs n calls at once through w and returns what each got.
func concurrently(t *testing.T, w *wrapProc, n int, call func(i int) (string, json.RawMessage)) []string {
	t.Helper()
	out := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			tool, args := call(i)
			res, err := w.CallTool(ctx, tool, args)
			out[i] = string(res)
			if err != nil {
				out[i] = "error: " + err.Error()
			}
		}()
	}
	wg.Wait()
	return out
}

// TestLargeMessagesKeepTheBudget: eight calls at once through the real binary, each ~60 MiB
// (4 MiB under the race detector, which reads them ten times slower), in each direction:
// requests from the agent (a read-only tool, passed through: what wrap holds is the messages)
// and answers from the server (a fenced tool, recorded). Every call is answered whole and
// runs once. Without the race detector (whose shadow memory is not wrap's), wrap's peak
// resident memory stays below what it took before the stdio budgets (RequestBudget,
// mcpstdio.AnswerBudget): requests 1,422 MiB then, about 600 MiB now; answers 1,390-1,443 MiB
// then, 840-970 MiB now (each answer is also recorded and copied into the agent's answer, which
// the budget does not count).
func TestLargeMessagesKeepTheBudget(t *testing.T) {
	const calls = 8
	size := 60 << 20
	if raceBuild {
		size = 4 << 20
	}
	pad := strings.Repeat("p", size)
	r := newRig(t)

	w := r.wrap()
	start := time.Now()
	got := concurrently(t, w, calls, func(i int) (string, json.RawMessage) {
		return "balance", json.RawMessage(fmt.Sprintf(`{"n":%d,"tag":"%s"}`, i, pad))
	})
	requests := vmHWM(w.Pid())
	t.Logf("%d requests of %d MiB: %s, wrap's peak resident memory %d MiB (race detector: %v)", calls, size>>20, time.Since(start).Round(time.Millisecond), requests>>20, raceBuild)
	for i, g := range got {
		if !strings.Contains(g, "balance read") {
			t.Errorf("request %d: %.300s", i, g)
		}
	}
	if n := r.effectsOf("balance"); n != calls {
		t.Errorf("%d executions of %d large requests", n, calls)
	}
	w.Close()

	w = r.wrap()
	start = time.Now()
	got = concurrently(t, w, calls, func(i int) (string, json.RawMessage) {
		return "huge", json.RawMessage(fmt.Sprintf(`{"size":%d,"n":%d}`, size, i))
	})
	answers := vmHWM(w.Pid())
	t.Logf("%d answers of %d MiB: %s, wrap's peak resident memory %d MiB", calls, size>>20, time.Since(start).Round(time.Millisecond), answers>>20)
	for i, g := range got {
		if len(g) < size || strings.Contains(g, `"isError":true`) {
			t.Errorf("answer %d: %d bytes: %.300s", i, len(g), g)
		}
	}
	if n := r.effectsOf("huge"); n != calls {
		t.Errorf("%d executions of %d calls with large answers", n, calls)
	}
	if !raceBuild && requests > 1<<30 {
		t.Errorf("wrap's peak resident memory reached %d MiB for %d requests of %d MiB", requests>>20, calls, size>>20)
	}
	if !raceBuild && answers > 1200<<20 {
		t.Errorf("wrap's peak resident memory reached %d MiB for %d answers of %d MiB", answers>>20, calls, size>>20)
	}
}
