package httpfront_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// A client that POSTs a fenced call, takes its answer as an event stream and then reads
// nothing (a real TCP connection, its receive buffer as small as an unread socket's) while
// the answer is larger than the sockets hold: the write that blocks is bounded in time, so the
// stream ends as if broken (its entry goes, its connection is closed) although its backlog,
// the one answer, is under its bound. A broken stream is not a failure: the call ran once, its
// outcome is recorded, and the call re-sent under a new id is given it as a replay. Without
// the bound the stream stays open for as long as the client keeps the connection.
func TestStalledCallStreamEndsAndKeepsTheOutcome(t *testing.T) {
	// As an event stream, and as a JSON answer (before 2026-12-03 a JSON answer's write had no
	// bound: its client held it, and the request's share of the budget, until TCP gave up).
	for _, accept := range []string{"application/json, text/event-stream", "application/json"} {
		t.Run(accept, func(t *testing.T) { stalledCall(t, accept) })
	}
}

func stalledCall(t *testing.T, accept string) {
	restore := httpfront.SetWriteTimeout(time.Second)
	t.Cleanup(restore) // after the gateway's cleanup: no stream reads it then
	g := newGW(t, nil)
	sid := g.open(nil)
	const size = 16 << 20 // more than loopback's socket buffers hold
	args := fmt.Sprintf(`{"size":%d}`, size)

	u, err := url.Parse(g.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := call(2, "huge", args)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: %s\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s",
		u.Path, u.Host, accept, sid, len(body), body)
	// Not read from here on.

	deadline := time.Now().Add(time.Minute)
	for len(mcptest.Effects(g.effects)) == 0 { // the stream is registered before the call runs
		if time.Now().After(deadline) {
			t.Fatal("the call never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Recording a 16 MiB result takes seconds under the race detector on a busy machine: the
	// wait is generous.
	deadline = time.Now().Add(2 * time.Minute)
	for g.front.OpenStreams() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the call's stream its client stopped reading is still open 2 minutes after the call ran (%d entries, %d bytes queued)", g.front.OpenStreams(), g.front.Backlog())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its connection is closed: reading it now reaches its end (after what the gateway's
	// socket still held), short of the answer.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.Copy(io.Discard, conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection of the ended stream is still open (%d bytes read)", got)
	}
	if got >= size {
		t.Fatalf("%d bytes arrived on the stalled stream; want it cut short of the %d-byte answer", got, size)
	}

	// The re-sent call's stream is read, but 16 MiB within the lowered bound is more than a
	// loaded machine manages under the race detector (it was cut: "not JSON"). No stream is
	// open now, so nothing reads the bound while it is put back.
	restore()
	r := g.mustPost(sid, nil, call(3, "huge", args))
	if text := resultText(t, r.last(t)); len(text) != size || !strings.Contains(r.raw[len(r.raw)-1], `"effectfence/replayed":true`) {
		t.Fatalf("the call re-sent after its stream was ended: %d bytes of text, %.300s; want the recorded %d, replayed", len(text), r.raw[len(r.raw)-1], size)
	}
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// A client that reads its answer slowly but steadily is not a client that stopped reading:
// the write bound (writeTimeout) is on progress, not on the whole answer. Here the answer, one
// message of 16 MiB, takes the client about twice the bound to read (the sockets' buffers
// kept small, so the sender waits on the reader from the start), and every part of it gets
// room well within the bound. Before, the answer was one write bounded as a whole: the stream
// was cut once that write passed the bound, so a client on a link slower than 64 MiB a minute
// could never receive a large answer, nor its replay, cut the same way (an SSE answer; a JSON
// one had no bound at all, so a client that stopped reading held it until TCP gave up).
func TestSlowReaderGetsTheWholeAnswer(t *testing.T) {
	// Generous for a part (on a loaded machine a reader or writer may wait seconds for a
	// core: at 5 s and at 10 s, CI under a load of 17 to 19 on 2 cores cut the event stream,
	// the reader and the gateway being one process), short of the whole.
	t.Cleanup(httpfront.SetWriteTimeout(20 * time.Second)) // after both subtests
	for _, accept := range []string{"application/json, text/event-stream", "application/json"} {
		t.Run(accept, func(t *testing.T) {
			t.Parallel() // with each other only: both want the same bound
			g := newGW(t, nil)
			sid := g.open(nil)
			srv := httptest.NewUnstartedServer(g.front)
			srv.Listener = smallBuffers{srv.Listener}
			srv.Start()
			t.Cleanup(srv.Close)
			const size = 16 << 20
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(call(2, "huge", fmt.Sprintf(`{"size":%d}`, size))))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", accept)
			req.Header.Set("Mcp-Session-Id", sid)
			dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error { return setBuffers(c) }}
			client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			// About 0.4 MB/s: 16 MiB take at least 40 s; a part of 64 KiB gets room in about
			// 160 ms.
			var got bytes.Buffer
			buf := make([]byte, 16<<10)
			for {
				n, err := resp.Body.Read(buf)
				got.Write(buf[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("reading the answer after %d bytes: %v", got.Len(), err)
				}
				time.Sleep(40 * time.Millisecond)
			}
			if got.Len() < size || !bytes.Contains(got.Bytes(), []byte(`"id":2`)) {
				t.Fatalf("a client reading steadily got %d bytes of a %d-byte answer: the stream was cut (ends %q)", got.Len(), size, got.Bytes()[max(0, got.Len()-80):])
			}
			if n := len(mcptest.Effects(g.effects)); n != 1 {
				t.Fatalf("%d executions, want 1", n)
			}
		})
	}
}

// smallBuffers gives each accepted connection small socket buffers.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = setBuffers(rc)
		}
	}
	return c, nil
}
