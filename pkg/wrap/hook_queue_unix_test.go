//go:build unix

package wrap_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// docs/RELIABILITY.md: hook events "wait in a queue of 64 for one worker, so the agent's
// answer never waits for the hook, and an event that finds the queue full is dropped with a
// log line". The hook hangs on the first event; 65 more intents become unknown (real child
// deaths): 64 wait in the queue, the 65th is dropped and logged, and every call is answered
// meanwhile (a queue that blocked would hold the agent's answer for as long as the hook
// hangs).
func TestOnUnknownHookQueueFullDropsTheEvent(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	started := filepath.Join(r.dir, "started")
	// The first delivery hangs (its pid in started); later ones return at once.
	hook := &wrap.Hook{Command: []string{"sh", "-c", `[ -e "$0" ] && exit 0; echo $$ > "$0"; exec sleep 600`, started}, Timeout: 3600e9}
	x, _ := r.inproc(wrap.Options{OnUnknown: hook}, initNoElicit, nil)
	unknownCall(t, x)
	var hung int
	waitFor(t, "the hook to start", func() bool {
		b, err := os.ReadFile(started)
		_, serr := fmt.Sscan(string(b), &hung)
		return err == nil && serr == nil
	})
	defer syscall.Kill(hung, syscall.SIGKILL)

	// The calls go on another goroutine, so that a call held by the hook's queue fails the
	// test after a bound instead of hanging it: the hung hook is then killed, which lets the
	// queue move and the proxy stop.
	answered := make(chan error, 1)
	var dropped string
	go func() {
		for i := 1; i <= 65; i++ {
			x.nextID++
			fmt.Fprintf(x.in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"die","arguments":{"tag":"t%d"}}}`+"\n", x.nextID, i)
			var res struct {
				ID     int    `json:"id"`
				Result result `json:"result"`
			}
			for {
				line, ok := <-x.lines
				if !ok {
					answered <- fmt.Errorf("call %d: the proxy stopped", i)
					return
				}
				if json.Unmarshal(line, &res) == nil && res.ID == x.nextID {
					break
				}
			}
			if code := string(res.Result.Meta["effectfence/code"]); code != `"prior_failure"` {
				answered <- fmt.Errorf("call %d: %+v; want the unknown outcome's refusal", i, res.Result)
				return
			}
			if i == 65 {
				_ = json.Unmarshal(res.Result.Meta["effectfence/intent"], &dropped)
			}
		}
		answered <- nil
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		syscall.Kill(hung, syscall.SIGKILL)
		t.Fatalf("65 calls were not answered within 3 minutes while the hook hung; log:\n%s", x.log.String())
	}
	log := x.log.String()
	if n := strings.Count(log, "on_unknown hook: queue full"); n != 1 || !strings.Contains(log, "the event of intent "+dropped+" is dropped") {
		t.Fatalf("want exactly the 65th event (%s) dropped with a log line, got %d such lines:\n%s", dropped, n, log)
	}
	x.close()
}
