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
	get := s.openGet()
	m, err := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	st, _, ok := s.register(m, nil, true, 0)
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

// A GET stream of the session opened while another is open takes it over: the old one is told
// to end, what was queued on it and not yet written goes to the new one first, in order, and
// the server's messages from then on go to the new one; the old one's end leaves the new one
// in place.
func TestNewGETStreamTakesOverTheOld(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	old := s.openGet()
	notes := []string{`{"jsonrpc":"2.0","method":"notifications/message","params":{"n":1}}`, `{"jsonrpc":"2.0","method":"notifications/message","params":{"n":2}}`, `{"jsonrpc":"2.0","id":"r","method":"roots/list"}`}
	for _, n := range notes[:2] {
		if err := s.Write([]byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	get := s.openGet()
	select {
	case <-old.replaced:
	default:
		t.Fatal("the old GET stream was not told to end")
	}
	if err := s.Write([]byte(notes[2])); err != nil {
		t.Fatal(err)
	}
	s.closeGet(old)
	var got []string
	for _, l := range get.take() {
		got = append(got, string(l))
	}
	if !slices.Equal(got, notes) || len(old.take()) != 0 {
		t.Fatalf("the new GET stream holds %q, want %q", got, notes)
	}
	if s.getSt != get {
		t.Fatal("the old stream's end closed the new one")
	}
}

// Messages with no request of their own go to the newest open SSE request stream, whichever
// streams ended before, and ending one of thousands of open streams costs the same as ending
// one of a few: a client holding many requests open on one session must not make each
// ending copy the rest.
func TestRoutingFollowsTheNewestOpenStream(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	get := s.openGet()
	const n = 2000
	streams := make([]*stream, n)
	for i := range streams {
		m, err := jsonrpc.Parse([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}}}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		st, _, ok := s.register(m, nil, i%7 != 3, 0) // some plain-JSON requests, which take nothing else
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
	get = s.openGet()
	for i := range streams {
		m, _ := jsonrpc.Parse([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}}}`, i)))
		streams[i], _, _ = s.register(m, nil, i%7 != 3, 0)
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

// The same request re-sent under its id after the proxy answered it, while the first POST
// is still writing that answer (a slow client, or one whose connection died silently: up to
// writeTimeout), joins a request that gets no second answer. It must receive the answer
// given, as docs/gateway.md promises ("the same message POSTed again byte for byte waits for
// the one answer"), and leave the id free once its stream ends; before, it waited for an
// answer that never came, and its stream's end left the id taken for good, so every later
// request of the session under that id was refused as "already in progress".
func TestResentAfterTheAnswerGetsTheAnswer(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}`)
	m, err := jsonrpc.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	first, _, ok := s.register(m, body, false, 0)
	if !ok {
		t.Fatal("cannot register the request")
	}
	const resp = `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`
	if err := s.Write([]byte(resp)); err != nil {
		t.Fatal(err)
	}
	<-first.final // post writes it to its client now; its unregister comes after that write
	again, adopted, ok := s.register(m, body, false, 0)
	if !ok || !adopted {
		t.Fatalf("the same request re-sent while its answer is written: ok %v adopted %v, want it to join", ok, adopted)
	}
	select {
	case line := <-again.final:
		if string(line) != resp {
			t.Fatalf("the re-sent request got %q, want the answer %q", line, resp)
		}
	default:
		t.Fatal("the re-sent request waits for an answer the proxy gave already (nothing will answer it again)")
	}
	s.unregister(first)
	s.unregister(again)
	other, _ := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"u","arguments":{}}}`))
	if _, _, ok := s.register(other, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"u","arguments":{}}}`), false, 0); !ok {
		t.Fatal("once both POSTs ended, a new request under the id is refused: the id stayed taken")
	}
}

// A different request under an id whose answer has been given (its POST still writing it)
// is a new request: it is served, and gets its own answer, never the earlier one.
func TestOtherRequestAfterTheAnswerIsServed(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}`)
	m, _ := jsonrpc.Parse(body)
	first, _, _ := s.register(m, body, false, 0)
	if err := s.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"first":true}}`)); err != nil {
		t.Fatal(err)
	}
	<-first.final
	body2 := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"u","arguments":{}}}`)
	m2, _ := jsonrpc.Parse(body2)
	second, adopted, ok := s.register(m2, body2, false, 0)
	if !ok || adopted {
		t.Fatalf("another request under an answered id: ok %v adopted %v, want it served as new", ok, adopted)
	}
	const resp2 = `{"jsonrpc":"2.0","id":1,"result":{"second":true}}`
	if err := s.Write([]byte(resp2)); err != nil {
		t.Fatal(err)
	}
	s.unregister(first)
	select {
	case line := <-second.final:
		if string(line) != resp2 {
			t.Fatalf("the second request got %q, want its own answer", line)
		}
	default:
		t.Fatal("the second request got no answer")
	}
	s.unregister(second)
}

// A request the agent cancelled ends without an answer (NoResponse); the same request re-sent
// under its id while the first POST is still ending is the agent asking again: a new request,
// served, never handed the first one's lack of an answer.
func TestResentAfterACancellationIsServed(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x"}}`)
	m, _ := jsonrpc.Parse(body)
	first, _, _ := s.register(m, body, false, 0)
	s.NoResponse(m.ID)
	if line := <-first.final; line != nil {
		t.Fatalf("the cancelled request got %q, want no answer", line)
	}
	again, adopted, ok := s.register(m, body, false, 0)
	if !ok || adopted {
		t.Fatalf("the same request re-sent after its cancellation: ok %v adopted %v, want it served as new", ok, adopted)
	}
	const resp = `{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}`
	if err := s.Write([]byte(resp)); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-again.final:
		if string(line) != resp {
			t.Fatalf("the re-sent request got %q, want its own answer", line)
		}
	default:
		t.Fatal("the re-sent request got no answer")
	}
	s.unregister(first)
	s.unregister(again)
}

// A response the proxy gave just before its session closed (a call that ended within the
// grace of a DELETE or a SIGTERM, while its stream was busy writing what came before) is
// written, not dropped for the session's end: each of the two being ready, the stream must
// not pick the end by chance. Before, it did half the time, and the client's stream ended
// without the answer (a fenced call's agent must send it again to learn it; a pass-through
// call's never learns it); a JSON answer was a 404, which says the request was not run.
func TestAnswerBeforeTheSessionClosedIsWritten(t *testing.T) {
	const resp = `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}`)
	m, _ := jsonrpc.Parse(body)
	for i := 0; i < 64; i++ {
		for _, sse := range []bool{true, false} {
			s := newSession("test", Caller{}, nil)
			st, _, _ := s.register(m, body, sse, 0)
			if err := s.Write([]byte(resp)); err != nil {
				t.Fatal(err)
			}
			s.close()
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			if sse {
				s.streamTo(rec, req, st, true)
			} else {
				s.writeAnswer(rec, req, st, nil)
			}
			if !strings.Contains(rec.Body.String(), `"id":1`) || rec.Code != http.StatusOK {
				t.Fatalf("try %d (sse %v): the answer given before the session closed was not written: %d %q", i, sse, rec.Code, rec.Body.String())
			}
			s.unregister(st)
		}
	}
}

// A request of the server's held while no stream was open is dropped by the server's
// notifications/cancelled only when MCP's SDKs would read that notification as naming it: by
// "requestId" spelled so (not "RequestId", which encoding/json took for it, keeping the last)
// and with a reason that is a string, if any (a notification with another reason is refused,
// cancelling nothing). The others stay held for the next stream, whose client answers them.
func TestHeldRequestIsCancelledAsTheSDKsReadIt(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	for _, id := range []int{5, 7, 9} {
		if err := s.Write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"roots/list"}`, id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, params := range []string{
		`{"requestId":5,"RequestId":7}`, // names 5
		`{"RequestId":9}`,               // names nothing
		`{"requestId":9,"reason":3}`,    // refused
	} {
		if err := s.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":` + params + `}`)); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	var held []string
	for _, line := range s.held {
		m, err := jsonrpc.Parse(line)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, string(m.ID))
	}
	s.mu.Unlock()
	if strings.Join(held, ",") != "7,9" {
		t.Fatalf("held after the cancellations: %v; want 7 and 9 (5 cancelled)", held)
	}
}

// A request of the server's routed to a stream whose HTTP response then ends before writing it
// (its client hung up: the gateway notices only after the request was queued there) is handed
// on, as the server's next request would be: to another open stream, else held for the next
// one the client opens. The same for the session's GET stream closed with it queued. A
// notification queued there is dropped, as before. The window is the moment between a client's
// hang-up and the gateway noticing it, so the session is driven directly: a request queued on
// the stream (Write) and the end of its response (unregister, closeGet) with it still queued.
// Before, it was dropped with its stream, and the server waited for an answer that could not
// come, holding the call that asked.
func TestServerRequestOfAStreamThatEndedIsHandedOn(t *testing.T) {
	const ask = `{"jsonrpc":"2.0","id":"srv-1","method":"elicitation/create","params":{"message":"sure?"}}`
	const note = `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`
	reg := func(t *testing.T, s *session, id int) *stream {
		t.Helper()
		m, err := jsonrpc.Parse(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}}}`, id))
		if err != nil {
			t.Fatal(err)
		}
		st, _, ok := s.register(m, nil, true, 0)
		if !ok {
			t.Fatal("cannot register the request")
		}
		return st
	}
	write := func(t *testing.T, s *session, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if err := s.Write([]byte(l)); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := func(st *stream) string {
		var out []string
		for _, l := range st.take() {
			out = append(out, string(l))
		}
		return strings.Join(out, "\n")
	}

	t.Run("held for the next stream", func(t *testing.T) {
		s := newSession("test", Caller{}, nil)
		st := reg(t, s, 1)
		write(t, s, note, ask)
		s.unregister(st) // its client hung up before the request was written
		get := s.openGet()
		if g := got(get); g != ask {
			t.Fatalf("the next stream the client opened got %q; want the server's request only", g)
		}
	})
	t.Run("to another open stream", func(t *testing.T) {
		s := newSession("test", Caller{}, nil)
		other := reg(t, s, 1)
		st := reg(t, s, 2) // the newest: it takes the request
		write(t, s, ask)
		s.unregister(st)
		if g := got(other); g != ask {
			t.Fatalf("the other open stream got %q; want the server's request", g)
		}
	})
	t.Run("GET stream closed", func(t *testing.T) {
		s := newSession("test", Caller{}, nil)
		get := s.openGet()
		write(t, s, ask, note)
		s.closeGet(get)
		st := reg(t, s, 1)
		if g := got(st); g != ask {
			t.Fatalf("the next stream the client opened got %q; want the server's request only", g)
		}
	})
}
