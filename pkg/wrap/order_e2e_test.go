package wrap_test

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// readUntil reads wrap's output until the response with id, returning the messages before it
// (as raw lines) and the response.
func (rw *rawWrap) readUntil(t *testing.T, id string) (before []string, resp string) {
	t.Helper()
	for {
		line, err := rw.out.ReadString('\n')
		if err != nil {
			t.Fatalf("no response %s: %v; stderr: %s", id, err, rw.log.String())
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("wrap wrote %q: %v", line, err)
		}
		if m.Method == "" && string(m.ID) == id {
			return before, strings.TrimSpace(line)
		}
		before = append(before, strings.TrimSpace(line))
	}
}

// TestProgressReachesTheAgentBeforeTheResult: the child writes n progress notifications and
// its result in one write; through wrap the agent must read every one of them before the
// result, for a pass-through tool and for a fenced one, every time.
func TestProgressReachesTheAgentBeforeTheResult(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"pass", "fenced"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			var flags []string
			if mode == "fenced" {
				flags = []string{"--fence", "progress"}
			}
			rw := r.rawWrap(flags...)
			if got := rw.roundTrip(t, initLine); !strings.Contains(got, `"result"`) {
				t.Fatalf("initialize: %s", got)
			}
			const calls, n = 60, 4
			for i := 1; i <= calls; i++ {
				token := fmt.Sprintf("tok-%d", i)
				req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"progress","arguments":{"n":%d,"tag":"%s-%d"},"_meta":{"progressToken":%q}}}`, i, n, mode, i, token)
				if _, err := io.WriteString(rw.in, req+"\n"); err != nil {
					t.Fatal(err)
				}
				before, resp := rw.readUntil(t, fmt.Sprint(i))
				if !strings.Contains(resp, "progress done") {
					t.Fatalf("call %d: %s", i, resp)
				}
				got := 0
				for _, l := range before {
					if strings.Contains(l, `"notifications/progress"`) && strings.Contains(l, fmt.Sprintf("%q", token)) {
						got++
					}
				}
				if got != n {
					t.Fatalf("call %d: the agent read %d of %d progress notifications before the result; before it: %q", i, got, n, before)
				}
			}
		})
	}
}

// TestListChangedIsForwardedInOrder: the child writes list_changed before the result of the
// call that changed its tools; the agent reads them in that order, and a call of the new tool
// sent right after works (wrap's re-listing runs beside the notification, not before it).
func TestListChangedIsForwardedInOrder(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.rawWrap()
	if got := rw.roundTrip(t, initLine); !strings.Contains(got, `"result"`) {
		t.Fatalf("initialize: %s", got)
	}
	if _, err := io.WriteString(rw.in, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add_tool","arguments":{}}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	before, resp := rw.readUntil(t, "1")
	if len(before) != 1 || !strings.Contains(before[0], `"notifications/tools/list_changed"`) || !strings.Contains(resp, "added") {
		t.Fatalf("want list_changed then the result, got %q then %s", before, resp)
	}
	if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"extra","arguments":{}}}`); !strings.Contains(got, "extra ran") {
		t.Fatalf("the new tool: %s", got)
	}
}

// TestCallsPipelinedBehindInitialize: an agent that writes initialize and its first calls
// without waiting for initialize's answer gets every call served: requests run on their own
// goroutines, and one read after initialize must not overtake it and be told that initialize
// was never sent.
func TestCallsPipelinedBehindInitialize(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.rawWrap()
	batch := initLine + "\n" +
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":7}}}` + "\n"
	if _, err := io.WriteString(rw.in, batch); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for len(got) < 3 {
		line, err := rw.out.ReadString('\n')
		if err != nil {
			t.Fatalf("answers so far %v: %v; stderr: %s", got, err, rw.log.String())
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.ID != nil {
			got[string(m.ID)] = strings.TrimSpace(line)
		}
	}
	if !strings.Contains(got["1"], `"name":"charge"`) || !strings.Contains(got["2"], `charged 7`) {
		t.Fatalf("pipelined requests were not served after initialize: %v", got)
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("want 1 execution, got %d", n)
	}
}
