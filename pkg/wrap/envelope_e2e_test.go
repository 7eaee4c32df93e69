package wrap_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A message that parsers read two ways is refused, not answered under one reading. JSON-RPC
// member names are case-sensitive, so by the specification "Method" (or "ID", or "paramſ")
// is just a member nobody knows; Go's encoding/json, which wrap's reading followed, takes it
// for "method" (Unicode folding: "ſ" is "s") and keeps the last of duplicates, where other
// parsers keep the first or refuse. Before this, wrap answered the first request below, a
// tools/call by the specification, as a ping (an empty result for a tool call that never ran)
// and ran the second with the arguments of "paramſ" instead of "params".
func TestEnvelopeReadTwoWaysIsRefused(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-memory")
	r := newRig(t)
	r.childCmdOverride = []string{bin}
	rw := r.rawWrap()
	send := func(line, id string) string {
		t.Helper()
		if _, err := io.WriteString(rw.in, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if id == "" {
			return ""
		}
		_, resp := rw.readUntil(t, id)
		return resp
	}
	if got := send(initLine, "0"); !strings.Contains(got, `"serverInfo"`) {
		t.Fatalf("initialize: %s", got)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "")
	create := func(name string) string {
		return fmt.Sprintf(`{"name":"create_entities","arguments":{"entities":[{"name":%q,"entityType":"order","observations":["charged"]}]}}`, name)
	}
	for _, c := range []struct{ line, id, want string }{
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":` + create("unfenced-5") + `,"Method":"ping"}`, "5", `member \"Method\" is JSON-RPC's \"method\" but for case`},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":` + create("unfenced-6") + `,"paramſ":` + create("other-6") + `}`, "6", `but for case`},
		{`{"jsonrpc":"2.0","id":7,"method":"ping","m\u0065thod":"tools/call","params":` + create("unfenced-7") + `}`, "7", `member \"method\" is given twice`},
		{`{"jsonrpc":"2.0","ID":8,"id":9,"method":"tools/call","params":` + create("unfenced-9") + `}`, "9", `but for case`},
	} {
		got := send(c.line, c.id)
		if !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, c.want) {
			t.Errorf("%s\n got %s\nwant an invalid-request error containing %s", c.line, got, c.want)
		}
	}
	// The same call, spelled once and in lower case, is fenced and runs.
	if got := send(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":`+create("fenced")+`}`, "10"); strings.Contains(got, `"error"`) || strings.Contains(got, `"isError":true`) {
		t.Fatalf("the plain call: %s", got)
	}
	raw, err := os.ReadFile(filepath.Join(r.dir, "memory.jsonl"))
	if err != nil || strings.Count(string(raw), `"type":"entity"`) != 1 || !strings.Contains(string(raw), `"fenced"`) {
		t.Errorf("the memory file holds %q (%v); want the one fenced entity", raw, err)
	}
	led := r.openLedger()
	var n int
	err = led.Engine.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(*fence.Record) bool { n++; return true })
	})
	if err != nil || n != 1 {
		t.Fatalf("the ledger holds %d records (%v); want 1, the plain call", n, err)
	}
}
