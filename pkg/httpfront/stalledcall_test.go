package httpfront_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
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
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s",
		u.Path, u.Host, sid, len(body), body)
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
