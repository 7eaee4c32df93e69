package httpfront

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
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
	st, _, ok := s.register(m, nil, true)
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

// Messages with no request of their own go to the newest open SSE request stream, whichever
// streams ended before, and ending one of thousands of open streams costs the same as ending
// one of a few: a client holding many requests open on one session must not make each
// ending copy the rest.
func TestRoutingFollowsTheNewestOpenStream(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	get, _ := s.openGet()
	const n = 2000
	streams := make([]*stream, n)
	for i := range streams {
		m, err := jsonrpc.Parse([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}}}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		st, _, ok := s.register(m, nil, i%7 != 3) // some plain-JSON requests, which take nothing else
		if !ok {
			t.Fatal("cannot register")
		}
		streams[i] = st
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	order := rnd.Perm(n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, i := range order {
		s.retire(streams[i]) // as streamTo does on the response, then unregister again
	}
	runtime.ReadMemStats(&after)
	if got := after.Mallocs - before.Mallocs; got > 50 {
		t.Fatalf("retiring %d open streams made %d allocations", n, got)
	}
	if err := s.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/message"}`)); err != nil {
		t.Fatal(err)
	}
	if got := get.take(); len(got) != 1 {
		t.Fatalf("with every request stream retired, the GET stream got %q", got)
	}

	// Again with routing checked after each ending, against the reference.
	s = newSession("test", Caller{}, nil)
	get, _ = s.openGet()
	for i := range streams {
		m, _ := jsonrpc.Parse([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}}}`, i)))
		streams[i], _, _ = s.register(m, nil, i%7 != 3)
	}
	// The reference: the open SSE streams, oldest first.
	var open []*stream
	for _, st := range streams {
		if st.sse {
			open = append(open, st)
		}
	}
	for k, i := range rnd.Perm(n) {
		st := streams[i]
		if k%2 == 0 {
			s.retire(st)
		}
		s.unregister(st) // a second removal of a retired stream changes nothing
		open = slices.DeleteFunc(open, func(o *stream) bool { return o == st })
		note := []byte(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"n":%d}}`, k))
		if err := s.Write(note); err != nil {
			t.Fatal(err)
		}
		want := get
		if len(open) > 0 {
			want = open[len(open)-1]
		}
		if got := want.take(); len(got) != 1 || string(got[0]) != string(note) {
			t.Fatalf("after %d endings the note went elsewhere than the newest open stream (got %q there)", k+1, got)
		}
	}
}
