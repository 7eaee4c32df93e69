package httpback

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Tests of a hostile or broken upstream, each over real HTTP to a server in the test process.

// An answer carrying both a result and an error is a success to one reader and a failure to
// another. It is not the server's error (a failure would free the intent, and a retry run the
// call again although the result says it happened): the call may have run. Before, the error
// won, as a *jsonrpc.Error.
func TestResultBesideErrorMayHaveRun(t *testing.T) {
	f, srv := newFake(t)
	s := session(t, upstream(t, srv.URL, Config{}))
	for _, mode := range []string{"json", "sse"} {
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			both := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"charged"}]},"error":{"code":-32000,"message":"declined"}}`, m.ID)
			if mode == "json" {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(both))
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "e1", []byte(both))
			<-r.Context().Done() // the stream stays open: the call must not wait on it
		}
		f.mu.Unlock()
		before := f.count("tools/call")
		_, err := callWithin(t, s, "%s: the call waited on after the server answered it", mode)
		mayHaveRun(t, err)
		if !strings.Contains(err.Error(), `both "result" and "error"`) {
			t.Fatalf("%s: %v; want it to name the answer's fault", mode, err)
		}
		if n := f.count("tools/call") - before; n != 1 {
			t.Fatalf("%s: %d POSTs of the call, want 1", mode, n)
		}
	}
}

// An HTTP error answer decides the outcome by its status; its body only informs. A server
// that sends the status and then stalls in the body does not hold the call: the read of the
// body is cut off after tailWait and the call fails as its status says. Before, the call
// waited for the body for as long as the server kept the connection open (in wrap, whose
// calls are detached from the agent's cancellation, for ever).
func TestStalledErrorBodyDoesNotHoldTheCall(t *testing.T) {
	old := tailWait
	tailWait = 200 * time.Millisecond
	t.Cleanup(func() { tailWait = old })
	f, srv := newFake(t)
	release := make(chan struct{})
	defer close(release)
	u := upstream(t, srv.URL, Config{})
	for _, code := range []int{500, 502, 400, 429} {
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32000,"message":"half`))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		f.mu.Unlock()
		s := session(t, u) // a 400 retired the last one
		_, err := callWithin(t, s, "HTTP %d with a stalled body held the call for 30 s", code)
		mayHaveRun(t, err)
		var se *StatusError
		if !errors.As(err, &se) || se.Status != code {
			t.Fatalf("HTTP %d: %v; want a *StatusError with that status", code, err)
		}
	}
}

// The body of an HTTP error answer is read for at most 64 KiB, whatever its length: a server
// that sends the status and then a body without end (here up to 64 MiB, then it stalls) does
// not hold the call, nor make the client buffer it, although tailWait is far off. The call
// fails as its status says, may have run, and the connection is closed (the server's next
// write fails, long before it has written what it meant to).
func TestEndlessErrorBodyIsReadForAtMost64KiB(t *testing.T) {
	old := tailWait
	tailWait = time.Hour // only the bound on bytes ends the read
	t.Cleanup(func() { tailWait = old })
	const meant = 64 << 20
	chunk := bytes.Repeat([]byte("e"), 64<<10)
	var written atomic.Int64
	ended := make(chan struct{}, 1)
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		defer func() { ended <- struct{}{} }()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32000,"message":"`))
		for written.Load() < meant {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
		<-r.Context().Done()
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	_, err := callWithin(t, s, "HTTP 500 with an endless body held the call for 30 s")
	mayHaveRun(t, err)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusInternalServerError {
		t.Fatalf("%v; want a *StatusError with status 500", err)
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatalf("the server still writes its error body 30 s after the call failed (%d MiB written): the connection was not closed", written.Load()>>20)
	}
	if n := written.Load(); n >= meant {
		t.Fatalf("the server wrote all %d MiB of its error body; want the client to stop reading after 64 KiB", n>>20)
	}
}

// A message longer than the limit ends the call with ErrTooLarge, may have run, and reading
// stops there: the server cannot make the client buffer more than the limit (the bytes it got
// to write are bounded), the connection is closed (the server's next write fails), and the
// session goes on. An endless data line (at the real MaxMessage, 64 MiB), endless data lines
// of one event, an endless JSON body, and a gzip bomb (Go's transport asks for gzip and
// decodes it) each; the last three at a limit of 1 MiB, which the race detector reads faster.
func TestOversizedAnswerStopsReading(t *testing.T) {
	if testing.Short() {
		t.Skip("writes hundreds of MiB")
	}
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	var bomb bytes.Buffer // 32 MiB of "a" inside a result, about 100 KiB compressed
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestSpeed)
	zw.Write([]byte(`{"jsonrpc":"2.0","id":2,"result":{"t":"`))
	for range 32 {
		zw.Write(chunk)
	}
	zw.Close()
	const cap = 4 * MaxMessage // the server gives up here: a client that reads on gets EOF
	old := maxMessage
	t.Cleanup(func() { maxMessage = old })
	var written atomic.Int64
	done := make(chan struct{}, 1)
	endless := func(w http.ResponseWriter, first, each []byte) {
		defer func() { done <- struct{}{} }()
		w.Write(first)
		for written.Load() < cap {
			n, err := w.Write(each)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
	line := append(append([]byte("data: "), chunk...), '\n')
	modes := []struct {
		name  string
		limit int
		call  func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message)
	}{
		{"endless data line", MaxMessage, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "text/event-stream")
			endless(w, []byte("data: "), chunk)
		}},
		{"endless data lines", 1 << 20, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "text/event-stream")
			endless(w, nil, line)
		}},
		{"endless JSON", 1 << 20, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "application/json")
			endless(w, []byte(`{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"t":"`), chunk)
		}},
		{"gzip bomb", 1 << 20, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			defer func() { done <- struct{}{} }()
			w.Write(bomb.Bytes())
		}},
	}
	f, srv := newFake(t)
	s := session(t, upstream(t, srv.URL, Config{}))
	for _, mode := range modes {
		written.Store(0)
		maxMessage = mode.limit
		f.mu.Lock()
		f.call = mode.call
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"big"}`))
		cancel()
		mayHaveRun(t, err)
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%s: %v (server wrote %d MiB); want ErrTooLarge", mode.name, err, written.Load()>>20)
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the server is still writing a minute after the call failed: the connection was not closed", mode.name)
		}
		// What the server got to write: the limit, the reader's buffer and the sockets'.
		if n := written.Load(); n > int64(mode.limit)+32<<20 {
			t.Fatalf("%s: the server wrote %d MiB before the client stopped reading; the limit is %d MiB", mode.name, n>>20, mode.limit>>20)
		}
	}
	f.mu.Lock()
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	}
	f.mu.Unlock()
	if _, err := s.Call(context.Background(), "ping", nil); err != nil {
		t.Fatalf("the session after the oversized answers: %v", err)
	}
}

// Event streams are read as the event-stream format says: a line ends with LF, CRLF or a lone
// CR; one byte order mark at the start of a stream is ignored; the data lines of one event are
// joined with LF; event, id and retry fields and comments do not disturb the answer. Before,
// a lone CR did not end a line (the stream's answer was never found: the call ended unknown
// when the stream did) and a byte order mark made the first line's field unknown (an answer
// on it was dropped, the call unknown).
func TestEventStreamFormat(t *testing.T) {
	f, srv := newFake(t)
	s := session(t, upstream(t, srv.URL, Config{}))
	for _, form := range []string{
		"\ufeffdata: %s\n\n",
		"\ufeffevent: message\r\nid: 1\r\nretry: 10\r\ndata: %s\r\n\r\n",
		": hi\revent: message\rid: 2\rdata: %s\r\r",
		"\ufeff: mixed\r\n\ndata: %s\r\r\n",
		"data: %s\r|\n\r|\n", // a CR at the end of one write, its LF in the next
	} {
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, part := range strings.Split(fmt.Sprintf(form, jsonrpc.Response(m.ID, json.RawMessage(`{"ok":true}`))), "|") {
				fmt.Fprint(w, part)
				w.(http.Flusher).Flush()
			}
		}
		f.mu.Unlock()
		res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"x"}`))
		if err != nil || string(res) != `{"ok":true}` {
			t.Fatalf("%q: %s %v", form, res, err)
		}
	}
	// One event's data lines, split by each kind of line end, are one message.
	f.mu.Lock()
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\rdata: \"id\":%s,\r\ndata:\"result\":\ndata: {\"n\":0}}\n\n", m.ID)
	}
	f.mu.Unlock()
	if res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"x"}`)); err != nil || string(res) != `{"n":0}` {
		t.Fatalf("data lines of one event: %s %v", res, err)
	}
	// A byte order mark only at the start: a second one is part of its line (an unknown
	// field, ignored), so the answer after it is the one that counts.
	f.mu.Lock()
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "\ufeff: hi\n\n\ufeffdata: %s\n\ndata: %s\n\n", jsonrpc.Response(m.ID, json.RawMessage(`{"n":1}`)), jsonrpc.Response(m.ID, json.RawMessage(`{"n":2}`)))
	}
	f.mu.Unlock()
	if res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"x"}`)); err != nil || string(res) != `{"n":2}` {
		t.Fatalf("a second byte order mark: %s %v; want the event after it", res, err)
	}
}

// An Upstream that was closed or killed leaves no connection open and no goroutine behind:
// not after a call, not after a call cut short by Kill while its stream was open (a server
// that sends only keep-alive comments). Before, the idle keep-alive connections of its own
// transport stayed open, with two goroutines each, until IdleConnTimeout (90 s); a gateway
// makes an Upstream per agent session, so they piled up with the sessions.
func TestClosedUpstreamLeavesNoConnections(t *testing.T) {
	f := &fake{t: t, sid: "s1", posts: map[string]int{}, headers: map[string]http.Header{}}
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		if strings.Contains(string(m.Params), "pings") {
			w.Header().Set("Content-Type", "text/event-stream")
			for r.Context().Err() == nil {
				if _, err := w.Write([]byte(": ping\n")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(10 * time.Millisecond)
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	}
	srv := httptest.NewUnstartedServer(f)
	var open atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	before := runtime.NumGoroutine()
	for _, way := range []string{"close", "kill", "kill mid-call"} {
		u := NewUpstream(Config{URL: srv.URL, Log: io.Discard})
		s := session(t, u)
		if _, err := s.Call(context.Background(), "ping", nil); err != nil {
			t.Fatal(err)
		}
		switch way {
		case "close":
			u.Close()
		case "kill":
			u.Kill()
		case "kill mid-call":
			errc := make(chan error, 1)
			go func() {
				_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pings"}`))
				errc <- err
			}()
			for f.count("tools/call") == 0 {
				time.Sleep(time.Millisecond)
			}
			u.Kill()
			mayHaveRun(t, <-errc)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for (open.Load() != 0 || runtime.NumGoroutine() > before) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n, g := open.Load(), runtime.NumGoroutine(); n != 0 || g > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("10 s after three Upstreams ended: %d connections open, %d goroutines (%d before)\n%s", n, g, before, buf[:runtime.Stack(buf, true)])
	}
}

// Answers that are not the response to the call, each on HTTP 200: the call ends at once as may
// have run (the server got the request), the request is POSTed once, and the session goes
// on. A second response to the same id after the first is ignored: the first counts.
func TestBrokenAnswersMayHaveRun(t *testing.T) {
	f, srv := newFake(t)
	release := make(chan struct{})
	defer close(release)
	resumed := make(chan struct{}, 1)
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-Id") != "" {
			resumed <- struct{}{}
			w.WriteHeader(http.StatusNotFound) // the session ended meanwhile
			return
		}
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
	u := upstream(t, srv.URL, Config{})
	jsonBody := func(body string) func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		return func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, body, m.ID)
		}
	}
	stream := func(body string) func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		return func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, body, m.ID)
		}
	}
	for _, c := range []struct {
		name string
		call func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message)
	}{
		{"another id", jsonBody(`{"jsonrpc":"2.0","id":999,"result":{}}%.0s`)},
		{"the id as a string", jsonBody(`{"jsonrpc":"2.0","id":"%s","result":{}}`)},
		{"a batch", jsonBody(`[{"jsonrpc":"2.0","id":%s,"result":{}}]`)},
		{"two messages", jsonBody(`{"jsonrpc":"2.0","id":%[1]s,"result":{}}{"jsonrpc":"2.0","id":%[1]s,"result":{}}`)},
		{"a request under the id", jsonBody(`{"jsonrpc":"2.0","id":%s,"method":"x"}`)},
		{"a byte order mark", jsonBody("\ufeff" + `{"jsonrpc":"2.0","id":%s,"result":{}}`)},
		{"a batch event", stream("data: [{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}]\n\n")},
		{"notifications only", stream("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n%.0s")},
		{"text/html", func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "text/html")
			w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
		}},
		{"no Content-Type", func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header()["Content-Type"] = nil
			w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
		}},
		{"a body cut mid-JSON", func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[`))
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}},
		{"a stream cut, its resumption answered 404", func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "e1", []byte(""))
		}},
	} {
		f.mu.Lock()
		f.call = c.call
		f.mu.Unlock()
		s := session(t, u)
		before := f.count("tools/call")
		_, err := callWithin(t, s, "%s: the call waited 30 s", c.name)
		mayHaveRun(t, err)
		if n := f.count("tools/call") - before; n != 1 {
			t.Fatalf("%s: %d POSTs, want 1", c.name, n)
		}
	}
	select {
	case <-resumed:
	default:
		t.Fatal("the cut stream was not resumed")
	}
	f.mu.Lock()
	f.call = stream("data: {\"jsonrpc\":\"2.0\",\"id\":%[1]s,\"result\":{\"n\":1}}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":%[1]s,\"result\":{\"n\":2}}\n\n")
	f.mu.Unlock()
	if res, err := session(t, u).Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`)); err != nil || string(res) != `{"n":1}` {
		t.Fatalf("two answers to one id: %s %v; want the first", res, err)
	}
}

// A server that starts answering initialize and then only trickles keep-alive comments (a
// slow-loris) cannot hold the connect: it fails after InitTimeout as not sent, and the
// stream's connection is closed.
func TestTricklingInitializeIsBounded(t *testing.T) {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		defer func() { done <- struct{}{} }()
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte(":\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	u := upstream(t, srv.URL, Config{InitTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := u.Session(ctx)
	if ctx.Err() != nil {
		t.Fatal("the connect waited 30 s on a server that trickles")
	}
	if !errors.Is(err, mcpstdio.ErrNotSent) || !strings.Contains(err.Error(), "did not answer initialize within 300ms") {
		t.Fatalf("%v; want not sent: did not answer initialize within 300ms", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server still writes its stream 10 s after the connect gave up")
	}
}

// A JSON answer counts once its JSON value is complete. A server that writes the response and
// then neither ends the body nor closes the connection does not hold the call: the rest of the
// body is cut off after tailWait and the response is the answer (whitespace after it too).
// What follows the value, if not whitespace, makes the answer invalid: may have run. Before,
// the call waited for the body's end for as long as the server held it (in wrap, for ever).
func TestJSONAnswerWhoseBodyDoesNotEnd(t *testing.T) {
	old := tailWait
	tailWait = 200 * time.Millisecond
	t.Cleanup(func() { tailWait = old })
	f, srv := newFake(t)
	release := make(chan struct{})
	defer close(release)
	s := session(t, upstream(t, srv.URL, Config{}))
	for _, after := range []string{"", "\n  \r\n", `{"jsonrpc":"2.0","id":1,"result":{}}`} {
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{"ok":true}`)))
			w.Write([]byte(after))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		f.mu.Unlock()
		res, err := callWithin(t, s, "after %q: the call waited 30 s for a body that does not end", after)
		if strings.TrimSpace(after) != "" {
			mayHaveRun(t, err)
			continue
		}
		if err != nil || string(res) != `{"ok":true}` {
			t.Fatalf("after %q: %s %v; want the response", after, res, err)
		}
	}
	// An empty body says so.
	f.mu.Lock()
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
	}
	f.mu.Unlock()
	if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`)); err == nil || !strings.Contains(err.Error(), "the response body is empty") {
		t.Fatalf("an empty body: %v", err)
	}
}

// TestIgnoredMessagesDoNotFloodTheLog: a server that answers a call with thousands of events
// nobody waits for, then the answer, costs the log a bounded number of lines (each one was a
// line before, at the speed of the network).
func TestIgnoredMessagesDoNotFloodTheLog(t *testing.T) {
	f, srv := newFake(t)
	const junk = 2500
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range junk {
			if i%2 == 0 {
				fmt.Fprintf(w, "data: not json %d\n\n", i)
			} else {
				fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{}}\n\n", 100000+i)
			}
		}
		writeEvent(w, "", jsonrpc.Response(m.ID, json.RawMessage(`{"content":[]}`)))
	}
	var log syncBuffer
	u := upstream(t, srv.URL, Config{Log: &log})
	s := session(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"pay"}`)); err != nil {
		t.Fatalf("the answer after the junk: %v", err)
	}
	lines := strings.Count(log.String(), "\n")
	if lines > ignoredLogged+junk/ignoredEvery+2 {
		t.Fatalf("%d log lines for %d ignored events; want at most %d", lines, junk, ignoredLogged+junk/ignoredEvery+2)
	}
	if !strings.Contains(log.String(), "2000 messages of MCP server") {
		t.Fatalf("the log does not count the ignored messages:\n%s", log.String())
	}
}

// syncBuffer is a log the session's goroutines may write while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// callWithin calls the tool pay through s and fails the test with the message format and
// args give if the call is still waiting after 30 s: every server here has answered, stalled
// or cut the call long before.
func callWithin(t *testing.T, s *Session, format string, args ...any) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"pay"}`))
	if ctx.Err() != nil {
		t.Fatalf(format, args...)
	}
	return res, err
}

// The version a session speaks, sent as Mcp-Protocol-Version on every later request, is the
// initialize result's "protocolVersion", spelled so, as MCP's SDK clients read it (the
// agent reads that result as it is). Before 2026-12-07 encoding/json read it, which also
// takes "ProtocolVersion" and keeps the last, so the header named another version than the
// one the agent and the server agreed on.
func TestProtocolVersionIsReadAsTheSDKsReadIt(t *testing.T) {
	f, srv := newFake(t)
	f.initResult = `{"protocolVersion":"2025-06-18","ProtocolVersion":"2025-03-26","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}`
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{"content":[]}`)))
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	if _, err := callWithin(t, s, "the call was not answered"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	got := f.headers["tools/call"].Get(HeaderProtocolVersion)
	f.mu.Unlock()
	if got != "2025-06-18" {
		t.Fatalf("the call was sent with %s %q, want 2025-06-18", HeaderProtocolVersion, got)
	}
}
