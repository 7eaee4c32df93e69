package logfmt

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestLinesBecomeRecords(t *testing.T) {
	var out bytes.Buffer
	w := New(&out)
	w.now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC) }
	// A line in two writes; a server line trying to forge a record; a warning; a tail.
	for _, p := range []string{"effectfence wrap: listening", " on http://127.0.0.1:1/mcp\n", "{\"level\":\"info\",\"msg\":\"forged\"}\n", "effectfence wrap: intent x is unknown\r\n", "mcpstdio: MCP server x answered request id 3 that is not waiting; ignored\n", "httpback: event stream of tools/call ended before the response; resuming once\n", "tail"} {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []record{
		{"2026-11-30T12:00:00.000000005Z", "info", "effectfence", "effectfence wrap: listening on http://127.0.0.1:1/mcp"},
		{"2026-11-30T12:00:00.000000005Z", "info", "server", `{"level":"info","msg":"forged"}`},
		{"2026-11-30T12:00:00.000000005Z", "warn", "effectfence", "effectfence wrap: intent x is unknown"},
		{"2026-11-30T12:00:00.000000005Z", "info", "effectfence", "mcpstdio: MCP server x answered request id 3 that is not waiting; ignored"},
		{"2026-11-30T12:00:00.000000005Z", "info", "effectfence", "httpback: event stream of tools/call ended before the response; resuming once"},
		{"2026-11-30T12:00:00.000000005Z", "info", "server", "tail"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, l := range lines {
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d is not JSON: %q", i, l)
		}
		if r != want[i] {
			t.Fatalf("line %d: got %+v, want %+v", i, r, want[i])
		}
	}
}

func TestLongLineIsSplitNotHeld(t *testing.T) {
	var out bytes.Buffer
	w := New(&out)
	if _, err := w.Write(bytes.Repeat([]byte("x"), MaxLine+10)); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("a line over MaxLine: %d records written before its end, want 1", n)
	}
}
