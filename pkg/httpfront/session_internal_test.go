package httpfront

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// A message the proxy writes right after a response, while that request's stream is still the
// newest open one (post unregisters it only once streamTo has returned), is not queued on the
// finished stream, where nobody would read it: it reaches the client on the GET stream.
func TestMessageAfterAResponseIsNotLost(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	get, ok := s.openGet()
	if !ok {
		t.Fatal("cannot open the GET stream")
	}
	m, err := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	st, ok := s.register(m, true)
	if !ok {
		t.Fatal("cannot register the request")
	}
	if err := s.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.streamTo(rec, httptest.NewRequest(http.MethodPost, "/mcp", nil), st, true) // returns once the response is written
	if !strings.Contains(rec.Body.String(), `"id":1`) {
		t.Fatalf("the response is not on its stream: %q", rec.Body.String())
	}
	// Here post's deferred unregister has not run yet.
	const note = `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`
	if err := s.Write([]byte(note)); err != nil {
		t.Fatal(err)
	}
	s.unregister(st)
	if got := get.take(); len(got) != 1 || string(got[0]) != note {
		t.Fatalf("the notification written after the response was lost: the GET stream got %q", got)
	}
}
