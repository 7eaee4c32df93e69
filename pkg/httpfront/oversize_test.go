package httpfront_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// docs/gateway.md, Endpoints: "a body over 64 MiB gets 413 (one whose Content-Length says so,
// at once, unread)". The adversaries are raw clients, not Go's: one declares a body of 1 GiB
// and sends none of it, and one sends a tools/call of more than 64 MiB in chunks, without a
// Content-Length, and keeps sending. The first is answered 413 without a byte of its body
// (the --body-timeout is 10 minutes here, so a gateway that waited for the body would not
// answer within the test's 2 minutes); the second is answered 413 once 64 MiB are in. The
// call never runs and the session goes on.
func TestOversizedBodiesAreRefusedAndRunNothing(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.BodyTimeout = 10 * time.Minute })
	sid := g.open(nil)
	u, err := url.Parse(g.url)
	if err != nil {
		t.Fatal(err)
	}
	head := func(framing string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\n%s\r\n\r\n", u.Path, u.Host, sid, framing)
	}
	// answer sends head on a new connection, then what body writes (in the background: the
	// gateway may answer, and close, before it is done), and reads the answer.
	answer := func(head string, body func(w io.Writer) error) (int, string) {
		t.Helper()
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		if body != nil {
			go func() { _ = body(c) }() // ends with an error once the gateway closed the connection
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}

	if status, body := answer(head(fmt.Sprintf("Content-Length: %d", 1<<30)), nil); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a declared body of 1 GiB, none of it sent: %d %.200q, want 413 at once", status, body)
	}

	prefix := call(5, "charge", `{"amount":5,"note":"`)
	chunked := func(w io.Writer) error {
		chunk := func(s string) error {
			_, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(s), s)
			return err
		}
		if err := chunk(prefix); err != nil {
			return err
		}
		pad := strings.Repeat("x", 1<<20)
		for range 80 { // 80 MiB of the note: past the bound, with no end in sight
			if err := chunk(pad); err != nil {
				return err
			}
		}
		if err := chunk(`"}}}`); err != nil {
			return err
		}
		_, err := io.WriteString(w, "0\r\n\r\n")
		return err
	}
	if status, body := answer(head("Transfer-Encoding: chunked"), chunked); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a chunked tools/call of more than 64 MiB: %d %.200q, want 413", status, body)
	}

	if n := len(mcptest.Effects(g.effects)); n != 0 {
		t.Fatalf("%d executions from refused bodies, want 0", n)
	}
	r := g.mustPost(sid, nil, call(9, "charge", `{"amount":5}`))
	if r.status != http.StatusOK || !strings.Contains(resultText(t, r.last(t)), "charged 5") {
		t.Fatalf("the session after the refused bodies: status %d %v", r.status, r.raw)
	}
}
