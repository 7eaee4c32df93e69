package wrap_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCancellationNamesItsRequestAsTheServerReadsIt: a notifications/cancelled names its
// request by the member "requestId", spelled so, as the TypeScript SDK (and Python's) read it:
// one spelled otherwise ("RequestId") names nothing, and one whose reason is not a string is
// refused whole. Through wrap, in front of the real server-everything, {"requestId":5,
// "RequestId":7} cancels request 5 and leaves 7 to be answered, and {"requestId":11,
// "reason":3} leaves 11 to be answered, as the server alone does. Before, wrap read the params
// with Go's encoding/json, which takes "RequestId" for "requestId" and keeps the last: it
// cancelled request 7 at the server (which abandoned it) and never answered it, and answered
// request 5, which the agent had cancelled; and it cancelled 11, dropping the reason.
func TestCancellationNamesItsRequestAsTheServerReadsIt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.childCmdOverride = []string{peer(t, "mcp-server-everything")}
	rw := r.initializedRawWrap("--ledger", "memory")
	rw.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// Calls of a read-only tool (passed through): each runs a second in the server.
	for _, id := range []string{"5", "7", "11"} {
		rw.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":1}}}`)
	}
	rw.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"RequestId":7,"reason":"the agent gave up on 5"}}`)
	rw.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":11,"reason":3}}`)
	// Requests 7 and 11 are answered, and request 5 is not (it never is: a ping sent after
	// their answers is answered before anything for 5 could be).
	// A request wrap cancelled is never answered: the wait for one ends, as a failure, after
	// a minute (the server answers each in about a second).
	lines := make(chan string)
	go func() {
		defer close(lines)
		for {
			line, err := rw.out.ReadString('\n')
			if err != nil {
				return
			}
			lines <- line
		}
	}()
	guard := time.After(time.Minute)
	answered := map[string]bool{}
	for !answered["9"] {
		if answered["7"] && answered["11"] && !answered["ping"] {
			rw.send(t, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
			answered["ping"] = true
		}
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("wrap's output ended (answered: %v); stderr: %s", answered, rw.log.String())
			}
			line = l
		case <-guard:
			t.Fatalf("no answer to every request wrap was not told to cancel within a minute (answered: %v); stderr: %s", answered, rw.log.String())
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("wrap wrote %q: %v", line, err)
		}
		switch id := string(m.ID); {
		case m.Method != "":
			// the server's notifications (tools/list_changed)
		case id == "5":
			t.Fatalf("request 5, which the agent cancelled, was answered (answered before it: %v): %s", answered, line)
		case id == "7" || id == "11":
			if !strings.Contains(line, "Long running operation completed") {
				t.Fatalf("request %s: %s", id, line)
			}
			answered[id] = true
		case id == "9" && answered["ping"]:
			answered[id] = true
		default:
			t.Fatalf("wrap wrote %s", line)
		}
	}
}
