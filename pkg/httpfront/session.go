package httpfront

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// session is one MCP session: its proxy, and the HTTP responses open on it. It is the proxy's
// Sink: it routes each message the proxy writes to the right response.
type session struct {
	id    string
	who   Caller
	proxy *wrap.Proxy
	done  chan struct{} // closed when the session is closed

	mu       sync.Mutex
	requests map[string]*stream // open request streams, by the request's id (jsonrpc.IDKey)
	tokens   map[string]*stream // by progressToken (jsonrpc.IDKey)
	newest   *stream            // the newest open SSE request stream; .older links the rest
	getSt    *stream            // the GET stream, if open
	// held are the server's requests that came while no stream could take them: the next
	// stream the client opens gets them (hold). Dropped, the server waited for an answer
	// that could not come.
	held     [][]byte
	heldSize int
	busy     int       // requests being answered
	last     time.Time // last activity
	closed   bool
}

func newSession(id string, who Caller, p *wrap.Proxy) *session {
	return &session{id: id, who: who, proxy: p, done: make(chan struct{}), requests: map[string]*stream{}, tokens: map[string]*stream{}, last: time.Now()}
}

func (s *session) touch() {
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
}

// idleSince is how long the session has had no activity and no request open (0 while busy).
// A request the proxy still serves keeps it busy too, though its stream is gone: a fenced
// call goes on after the agent's stream broke, and closing the session would stop its server
// mid-call.
func (s *session) idleSince(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy > 0 || s.getSt != nil || (s.proxy != nil && s.proxy.Serving() > 0) {
		return 0
	}
	return now.Sub(s.last)
}

func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
}

// register opens the stream of request m, whose POST body is body. It returns false when
// another request with its id is still being served. That includes a request whose client
// hung up: the proxy serves it on, and its id stays taken until the proxy has answered it,
// since a new request under that id would be handed the first one's answer (and its own
// dropped). The same body re-sent under that id (a client retrying its POST) joins the wait
// instead (adopted): it receives the answer of the request it repeats, and must not be
// dispatched again. That holds whether or not the gateway has noticed the first POST's client
// hang up (a cut the client saw may reach the gateway late, or, silent, never): the earlier
// POST, if still connected, receives the answer too (also), and the re-sent one takes over
// the request's progress notifications. Once the proxy has answered, the id is free: the same
// body re-sent while the first POST still writes that answer gets the answer at once, another
// request is a new one.
//
// held is the room of RequestBudget the body took: the stream keeps it from here on (see
// stream.held), unless register refuses the request (ok false), when the caller keeps it.
func (s *session) register(m *jsonrpc.Message, body []byte, sse bool, held int64) (st *stream, adopted, ok bool) {
	// The token is the params' "_meta" and its "progressToken", spelled so, as MCP's SDKs read
	// them (a malformed params object is the proxy's to refuse). Both by value, not by bytes:
	// the proxy keys a cancellation by the id's value, a client compares ids as values
	// ("\u0071" is "q", 5.0 is 5), and a server writes the progress token back in its own
	// spelling.
	token := jsonrpc.MemberValue(jsonrpc.MemberValue(m.Params, "_meta"), "progressToken")
	st = newStream(jsonrpc.IDKey(m.ID), jsonrpc.IDKey(token), sse)
	st.body = body
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.requests[st.id]
	if old != nil && old.answered {
		// The proxy has answered it; its POST is still writing the answer (to a slow client,
		// or one gone silently). The proxy will not answer that id again: the same request
		// re-sent gets the answer given, another one is a new request, and so is the same one
		// re-sent after the agent cancelled it (it got no answer: the agent asks again).
		if old.line != nil && bytes.Equal(old.body, body) {
			adopted, st.answered, st.line = true, true, old.line
			st.final <- old.line
		}
		old = nil
	}
	if old != nil {
		if !bytes.Equal(old.body, body) {
			return nil, false, false
		}
		adopted = true
		st.also = append(st.also, old.also...)
		if !old.orphan {
			st.also = append(st.also, old)
		} else {
			// The request the orphan stood for is still served, its message held: its room
			// goes with the entry that now stands for it.
			st.held, old.held = old.held, 0
		}
	}
	st.held += held
	s.requests[st.id] = st
	if st.token != "" && (s.tokens[st.token] == nil || (old != nil && s.tokens[st.token] == old)) {
		s.tokens[st.token] = st
	}
	if sse {
		s.route(st)
	}
	s.busy++
	s.last = time.Now()
	return st, adopted, true
}

// unregister ends the stream of a request. A request not answered yet (its client hung up)
// keeps its id, as an orphan, until the proxy answers it (Write, NoResponse).
func (s *session) unregister(st *stream) {
	close(st.gone)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.requests[st.id] == st && !st.answered {
		st.orphan = true // it keeps its room of the budget until the proxy answers (answer)
	} else {
		if s.requests[st.id] == st {
			delete(s.requests, st.id)
		}
		requests.Release(st.held)
		st.held = 0
	}
	if st.token != "" && s.tokens[st.token] == st {
		delete(s.tokens, st.token)
	}
	s.unroute(st)
	s.redeliver(st)
	s.busy--
	s.last = time.Now()
}

// answer hands the proxy's response to request id (nil: it gets none) to its stream, and
// frees the id of an orphan; s.mu is held.
func (s *session) answer(id string, line []byte) {
	st := s.requests[id]
	if st == nil || st.answered {
		return // a second response to one request: the first stands
	}
	st.answered, st.line = true, line
	for _, p := range st.also { // earlier POSTs of the same request (see register)
		if !p.answered {
			p.answered = true
			p.final <- line // buffer 1, empty while unanswered
		}
	}
	if st.orphan {
		delete(s.requests, id) // nobody waits: the outcome is the proxy's (and the ledger's)
		requests.Release(st.held)
		st.held = 0
		return
	}
	st.final <- line // buffer 1, and answered is set once
}

// retire stops routing messages to the request stream st, which is about to end.
func (s *session) retire(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unroute(st)
}

// route makes st the newest of the streams that take other messages; s.mu is held.
func (s *session) route(st *stream) {
	st.older, st.routed = s.newest, true
	if s.newest != nil {
		s.newest.newer = st
	}
	s.newest = st
	s.flushHeld(st)
}

// hold keeps a request of the server's that no stream could take, for the next one (at most
// maxBacklog bytes of them; beyond, it is dropped as before); s.mu is held.
func (s *session) hold(line []byte) {
	if s.heldSize+len(line) > maxBacklog {
		return
	}
	s.held = append(s.held, line)
	s.heldSize += len(line)
}

// unhold drops the held request that the server's notifications/cancelled m names; s.mu is
// held. It reports whether one was held.
//
// The notification is read as MCP's SDKs read it (jsonrpc.Cancelled): its request is named by
// "requestId" spelled so, and one whose reason is not a string is refused, cancelling nothing.
// Before 2026-12-07 encoding/json read {"requestId":5,"RequestId":7} as naming 7, and dropped
// request 7, which the client's SDK would have been handed and answered, the server waiting for
// it (TestHeldRequestIsCancelledAsTheSDKsReadIt).
func (s *session) unhold(m *jsonrpc.Message) bool {
	if len(s.held) == 0 {
		return false
	}
	requestID, _, ok := jsonrpc.Cancelled(m.Params)
	if !ok {
		return false
	}
	for i, line := range s.held {
		if r, err := jsonrpc.Parse(line); err == nil && jsonrpc.IDKey(r.ID) == jsonrpc.IDKey(requestID) {
			s.heldSize -= len(line)
			s.held = append(s.held[:i:i], s.held[i+1:]...)
			return true
		}
	}
	return false
}

// flushHeld hands the held requests to st, a stream just opened; s.mu is held.
func (s *session) flushHeld(st *stream) {
	for _, line := range s.held {
		st.push(line)
	}
	s.held, s.heldSize = nil, 0
}

// unroute removes st from the streams that take other messages, in constant time however
// many requests the session has open (a copy of the list per ending stream made a client's
// thousands of concurrent requests cost their square); s.mu is held. Removing it twice, or a
// stream never routed, does nothing.
func (s *session) unroute(st *stream) {
	if !st.routed {
		return
	}
	if st.newer != nil {
		st.newer.older = st.older
	} else {
		s.newest = st.older
	}
	if st.older != nil {
		st.older.newer = st.newer
	}
	st.older, st.newer, st.routed = nil, nil, false
}

// openGet opens the session's GET stream. One already open is taken over: it ends
// (replaced), and what was queued on it and not yet written goes to the new one. A client
// opens a GET stream again when it saw its stream break, and the gateway may not have: a
// middlebox that lost the connection, a client whose socket was destroyed, leave the old one
// open and silent here until TCP gives up (before 2026-12-06 the new GET was refused 409 all
// that time; the TypeScript SDK gave up after two retries, and the server's later messages,
// its requests included, went to the dead stream). Only the session's principal can name it.
func (s *session) openGet() *stream {
	st := newStream("", "", true)
	st.replaced = make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.getSt; old != nil {
		for _, line := range old.take() {
			st.push(line)
		}
		close(old.replaced)
	}
	s.getSt = st
	s.flushHeld(st)
	return st
}

func (s *session) closeGet(st *stream) {
	close(st.gone)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.getSt == st {
		s.getSt = nil
	}
	s.redeliver(st) // a stream taken over (openGet) has handed its queue on already
	s.last = time.Now()
}

// Write is the proxy's Sink: a response goes to its request's stream; a progress
// notification to the stream of its token; anything else to the newest open SSE request
// stream, else the GET stream. A request of the server's with no open stream to take it waits
// for the next stream the client opens (hold; before 2026-12-06 it was dropped, and the
// server waited for an answer that could not come: TestServerRequestWaitsForAStream), unless
// the server cancels it first. Any other message with no open stream to take it is dropped
// (logged by nobody: the client hung up; a tool call's outcome is in the ledger regardless),
// as is one that would pass the bound on a stream's backlog (see maxBacklog; that stream ends).
func (s *session) Write(line []byte) error {
	m, err := jsonrpc.Parse(line)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.IsResponse() {
		s.answer(jsonrpc.IDKey(m.ID), line)
		return nil
	}
	if m.Method == "notifications/progress" {
		// Its "progressToken", spelled so, as MCP's SDK clients read it.
		if token := jsonrpc.MemberValue(m.Params, "progressToken"); token != nil {
			if st := s.tokens[jsonrpc.IDKey(token)]; st != nil && st.sse {
				if !st.push(line) {
					s.unroute(st) // stalled: it ends (streamTo)
				}
				return nil
			}
		}
	}
	s.deliver(m, line)
	return nil
}

// deliver routes a message that is neither a response nor a progress notification of an open
// request: to the newest open SSE request stream, else the GET stream, else, a request of the
// server's, held for the next stream (see Write); s.mu is held.
func (s *session) deliver(m *jsonrpc.Message, line []byte) {
	if st := s.newest; st != nil {
		if !st.push(line) {
			s.unroute(st)
		}
		return
	}
	if st := s.getSt; st != nil {
		if !st.push(line) {
			s.getSt = nil // a new GET stream may be opened
		}
		return
	}
	switch {
	case m.IsRequest():
		s.hold(line) // no stream is open: the next one takes it
	case m.Method == "notifications/cancelled":
		s.unhold(m) // the server gave up on a request not yet handed out: it never will be
	}
}

// redeliver hands on the server's requests that were routed to st and never written to its
// client: st's HTTP response ended first (the client hung up, or the session's GET stream was
// closed), and st takes nothing more (it is unrouted, or no longer the GET stream). They go
// where the server's next request would go (deliver). Before 2026-12-07 they were dropped with
// st, and the server waited for an answer that could not come, holding the call that asked
// (TestServerRequestOfAStreamThatEndedIsHandedOn). What else was queued there (notifications)
// is dropped, as before; s.mu is held.
func (s *session) redeliver(st *stream) {
	for _, line := range st.take() {
		if m, err := jsonrpc.Parse(line); err == nil && m.IsRequest() {
			s.deliver(m, line)
		}
	}
}

// NoResponse ends the wait of a request that gets no response (the agent cancelled it).
func (s *session) NoResponse(id json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer(jsonrpc.IDKey(id), nil)
}

// streamTo writes the stream as server-sent events until the response is written (request
// streams), the client goes away or the session closes. It reports whether a request's
// response (or its end without one) was written in full.
func (s *session) streamTo(w http.ResponseWriter, r *http.Request, st *stream, request bool) bool {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	rc := http.NewResponseController(w)
	send := func(lines [][]byte) bool {
		for _, l := range lines {
			if !writeBounded(w, rc, sseEvent(l)) {
				return false
			}
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-st.ready:
			if !send(st.take()) {
				return false
			}
		case line := <-st.final:
			// What was routed here before the response goes first. Retire the stream before
			// that last take: the stream stays the newest open one until post unregisters it,
			// and a message the proxy writes after the response (a notification, a request of
			// the server's) would be queued where nobody reads any more, and lost. Retired, the
			// stream gets nothing more: such a message goes to another open stream or the GET
			// stream.
			s.retire(st)
			rest := st.take()
			if line != nil { // nil: the request was cancelled and gets no response
				rest = append(rest, line)
			}
			return send(rest)
		case <-tick.C:
			if !writeBounded(w, rc, []byte(": keep-alive\n\n")) {
				return false
			}
			if fl != nil {
				fl.Flush()
			}
		case <-r.Context().Done():
			return false
		case <-st.stalled:
			return false // the client read too little for too long: what was queued is dropped
		case <-st.replaced:
			return false // a new GET stream of the session took over (openGet)
		case <-s.done:
			answered := false
			if request {
				// The response may have come just before the end: it goes too.
				rest := st.take()
				select {
				case line := <-st.final:
					s.retire(st)
					rest = append(rest, st.take()...)
					if line != nil {
						rest = append(rest, line)
					}
					answered = true
				default:
				}
				answered = send(rest) && answered
			}
			return answered
		}
	}
}

// writeAnswer waits for the response to a request whose client takes it as JSON, and writes
// it (rc: the response's controller, nil for a new one). A response given before the session
// closed is written: the 404 for a closed session says the request was not run. It reports
// whether the response (or the 202 of a request that gets none) was written in full.
func (s *session) writeAnswer(w http.ResponseWriter, r *http.Request, st *stream, rc *http.ResponseController) bool {
	if rc == nil {
		rc = http.NewResponseController(w)
	}
	var line []byte
	select {
	case line = <-st.final:
	case <-r.Context().Done():
		return false // the client hung up; the request goes on and its outcome is recorded
	case <-s.done:
		select {
		case line = <-st.final:
		default:
			httpError(w, http.StatusNotFound, "the session was closed")
			return false
		}
	}
	if line == nil { // cancelled by the agent: no response is sent
		w.WriteHeader(http.StatusAccepted)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	return writeBounded(w, rc, line) // a client that stops reading is cut off, as on a stream
}

// writeChunk is the most writeBounded writes under one deadline.
const writeChunk = 64 << 10

// writeBounded writes b to the client in parts of at most writeChunk bytes, each within
// writeTimeout: the bound is on progress, so a client that stops reading is cut off, and one
// that reads slowly (a large answer over a slow link) is not. It reports whether all of b was
// written. Without a write deadline (a ResponseWriter that does not support it) there is no
// bound.
func writeBounded(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(b[:n]); err != nil {
			return false
		}
		b = b[n:]
	}
	return true
}

func sseEvent(line []byte) []byte {
	b := make([]byte, 0, len(line)+22)
	b = append(b, "event: message\ndata: "...)
	b = append(b, line...)
	return append(b, '\n', '\n')
}
