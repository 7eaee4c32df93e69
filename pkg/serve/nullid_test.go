package serve_test

import (
	"context"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// A tools/call whose id is null (MCP: an id is a string or a number, never null) is answered
// with a JSON-RPC error under id null saying it did not run; one without an id (a
// notification: nothing may answer it) is not run and the log says so. Before, both were
// dropped without a word, and the client waited for an answer that never came.
func TestToolsCallWithoutAnIDIsRefusedAloud(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	logs := &syncbuf.Buffer{}
	c := startStdio(t, eng, serve.Options{Log: log.New(logs, "", 0)})
	select {
	case resp := <-c.sendLine("null", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"pay:null-id","tool":"t"}}}`):
		if !strings.Contains(string(resp), `"code":-32600`) || !strings.Contains(string(resp), "NOT run") {
			t.Errorf("a tools/call with id null: %s; want a -32600 error saying it did not run", resp)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("a tools/call with id null was never answered")
	}
	if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"pay:no-id","tool":"t"}}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "without an id") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "without an id") {
		t.Errorf("the log does not say a tools/call without an id was not run: %q", logs.String())
	}
	for _, intent := range []string{"pay:null-id", "pay:no-id"} {
		rec, err := eng.Status(context.Background(), intent)
		if err != nil || rec.State != fence.StateNone {
			t.Errorf("%s: state %s (%v); want none: the call did not run", intent, rec.State, err)
		}
	}
}

// A tools/call whose id is true, false, an object or an array (MCP: a string or a number) is
// refused like one with id null, under id null, and not run. Before, mcp-go ran it: a
// fence_prepare with id true claimed its intent and its ticket went out under `true`.
func TestToolsCallWithAnIDOfTheWrongTypeIsNotRun(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	ids := []string{`true`, `false`, `{"n":1}`, `[7]`, ` true`}
	for i, id := range ids {
		intent := "pay:wrong-id-" + string(rune('a'+i))
		line := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"` + intent + `","tool":"t"}}}`
		select {
		case resp := <-c.sendLine("null", line):
			if !strings.Contains(string(resp), `"code":-32600`) || !strings.Contains(string(resp), "NOT run") {
				t.Errorf("a tools/call with id %s: %s; want a -32600 error under id null saying it did not run", id, resp)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a tools/call with id %s was not answered under id null", id)
		}
		rec, err := eng.Status(context.Background(), intent)
		if err != nil || rec.State != fence.StateNone {
			t.Errorf("id %s: %s is %s (%v); want none: the call must not run", id, intent, rec.State, err)
		}
	}
	// Strings and numbers of every spelling still run.
	for _, id := range []string{`"s"`, `-3`, `7.5`, `1e3`} {
		line := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"fence_status","arguments":{"intent":"x"}}}`
		select {
		case resp := <-c.sendLine(id, line):
			if strings.Contains(string(resp), `"error"`) {
				t.Errorf("id %s: %s; want a result", id, resp)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a tools/call with id %s was not answered under its id", id)
		}
	}
}
