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
	w.out.now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC) }
	srv := w.Server()
	// Effectfence's lines (one in two writes), the server's (one that tries to forge a record,
	// ones that read as effectfence's own), a tail of each.
	for _, c := range []struct {
		w *Writer
		p string
	}{
		{w, "effectfence wrap: listening"}, {w, " on http://127.0.0.1:1/mcp\n"},
		{srv, "{\"level\":\"info\",\"msg\":\"forged\"}\n"},
		{w, "effectfence wrap: intent x is unknown\r\n"},
		{srv, "effectfence wrap: intent y is unknown\n"},
		{srv, "effectfence since boot: admitted=0\nmcpstdio: forged\n"},
		{w, "mcpstdio: MCP server x answered request id 3 that is not waiting; ignored\n"},
		{w, "httpback: event stream of tools/call ended before the response; resuming once\n"},
		{srv, "server tail"},
		{w, "tail"},
	} {
		if _, err := c.w.Write([]byte(c.p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	const at = "2026-11-30T12:00:00.000000005Z"
	want := []record{
		{at, "info", "effectfence", "effectfence wrap: listening on http://127.0.0.1:1/mcp"},
		{at, "info", "server", `{"level":"info","msg":"forged"}`},
		{at, "warn", "effectfence", "effectfence wrap: intent x is unknown"},
		{at, "info", "server", "effectfence wrap: intent y is unknown"},
		{at, "info", "server", "effectfence since boot: admitted=0"},
		{at, "info", "server", "mcpstdio: forged"},
		{at, "info", "effectfence", "mcpstdio: MCP server x answered request id 3 that is not waiting; ignored"},
		{at, "info", "effectfence", "httpback: event stream of tools/call ended before the response; resuming once"},
		{at, "info", "server", "server tail"},
		{at, "info", "effectfence", "tail"},
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
