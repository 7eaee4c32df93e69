package wrap_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// An agent that answers a request of the server's (roots/list here) with a line that is not a
// valid JSON-RPC response (a result beside an error, another "jsonrpc") has answered it, if
// badly: the server's request gets an error at once, as mcpstdio gives a call the server
// answered so. Before, wrap sent the agent an error under the server's request's id, which names
// no request of the agent's, and the server's request waited for an answer that had come (the
// test server's for 10 s, then its call failed as "client did not answer").
func TestInvalidAnswerOfTheAgentReachesTheServer(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]string{
		"result and error": `{"jsonrpc":"2.0","id":%s,"result":{"roots":[]},"error":{"code":-32000,"message":"no"}}`,
		"jsonrpc 1.0":      `{"jsonrpc":"1.0","id":%s,"result":{"roots":[]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			rw := r.initializedRawWrap()
			var ask struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if err := json.Unmarshal([]byte(rw.roundTrip(t, toolCall(2, "ask", `{}`))), &ask); err != nil || ask.Method != "roots/list" {
				t.Fatalf("want the server's roots/list passed on: %v %+v", err, ask)
			}
			got := rw.roundTrip(t, strings.Replace(answer, "%s", string(ask.ID), 1))
			var m struct {
				ID     json.RawMessage `json:"id"`
				Result result          `json:"result"`
			}
			if err := json.Unmarshal([]byte(got), &m); err != nil || string(m.ID) != "2" || !strings.Contains(m.Result.text(), "client error") {
				t.Fatalf("after the agent's invalid answer, wrap wrote %s; want the call's answer, the server told at once that the client answered with an error", got)
			}
		})
	}
}
