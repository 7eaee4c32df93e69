package wrap_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCancellationNamesItsRequestAsTheServerReadsIt: a notifications/cancelled names its
// request by the member "requestId", spelled so, as the TypeScript SDK (and Python's) read it:
// one spelled otherwise ("RequestId") names nothing. Through wrap, in front of the real
// server-everything, {"requestId":5,"RequestId":7} cancels request 5 and leaves 7 to be
// answered, as the server alone would. Before, wrap read the params with Go's encoding/json,
// which takes "RequestId" for "requestId" and keeps the last: it cancelled request 7 at the
// server (which abandoned it) and never answered it, and answered request 5, which the agent
// had cancelled.
func TestCancellationNamesItsRequestAsTheServerReadsIt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.childCmdOverride = []string{peer(t, "mcp-server-everything")}
	rw := r.initializedRawWrap("--ledger", "memory")
	rw.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// Two calls of a read-only tool (passed through): each runs a second in the server.
	rw.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":1}}}`)
	rw.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":1}}}`)
	rw.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"RequestId":7,"reason":"the agent gave up on 5"}}`)
	// Request 7 is answered, and request 5 is not (it never is: a ping sent after 7's answer
	// is answered before anything for 5 could be).
	for _, want := range []string{"7", "9"} {
		if want == "9" {
			rw.send(t, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
		}
		for {
			line, err := rw.out.ReadString('\n')
			if err != nil {
				t.Fatalf("no response %s: %v; stderr: %s", want, err, rw.log.String())
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("wrap wrote %q: %v", line, err)
			}
			if m.Method != "" {
				continue // the server's notifications (tools/list_changed)
			}
			if string(m.ID) == "5" {
				t.Fatalf("request 5, which the agent cancelled, was answered (and 7 was not, first): %s", line)
			}
			if string(m.ID) == want {
				if want == "7" && !strings.Contains(line, "Long running operation completed") {
					t.Fatalf("request 7: %s", line)
				}
				break
			}
		}
	}
}
