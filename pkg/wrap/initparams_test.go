package wrap_test

import (
	"strings"
	"testing"
)

// An initialize whose clientInfo (or its name) is not what MCP says is an object all the same:
// it goes to the server, which judges it. wrap refused it saying its params must be an
// object.
func TestInitializeWithAnOddClientInfoIsForwarded(t *testing.T) {
	t.Parallel()
	for name, info := range map[string]string{"name a number": `{"name":7,"version":"1"}`, "a string": `"raw"`} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rw := newRig(t).rawWrap()
			got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":`+info+`}}`)
			if !strings.Contains(got, `"serverInfo"`) {
				t.Fatalf("initialize with clientInfo %s: %s; want the server's answer", info, got)
			}
		})
	}
}
