package httpfront_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// rawGET opens the session's GET stream over a new TCP connection with the extra header
// lines given as written (taking over a stream still open). It returns the stream's reader
// and a function that closes it.
func rawGET(t *testing.T, gwURL, sid, extra string) (*bufio.Reader, func()) {
	t.Helper()
	u, err := url.Parse(gwURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nMcp-Session-Id: %s\r\n%s\r\n", u.Path, u.Host, sid, extra)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		t.Fatalf("GET with %.60q: status %d, want 200", extra, resp.StatusCode)
	}
	return bufio.NewReader(resp.Body), func() { conn.Close() }
}

// nextEvent reads the stream up to its next event with data, and returns the event's lines.
func nextEvent(t *testing.T, r *bufio.Reader) []string {
	t.Helper()
	var lines []string
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the GET stream ended before an event: %v", err)
		}
		l = strings.TrimRight(l, "\r\n")
		switch {
		case l == "" && len(lines) > 0:
			return lines
		case l == "" || strings.HasPrefix(l, ":"):
		default:
			lines = append(lines, l)
		}
	}
}

// docs/gateway.md and the package's doc: the gateway's events carry no ids and it keeps no
// replay buffer, so a GET with Last-Event-ID resumes nothing: whatever the value (huge,
// negative, past any integer, not a number, bytes outside ASCII, an id a client might guess
// another session uses), the stream opens as a new one, replays nothing sent before, and
// carries what comes next. The session and its fence go on.
func TestLastEventIDResumesNothing(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	progress := func(id int, token string) {
		t.Helper()
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"progress","arguments":{"n":1},"_meta":{"progressToken":%q}}}`, id, token)
		if r := g.mustPost(sid, hdr{"Accept": "application/json"}, body); r.status != http.StatusOK || !strings.Contains(resultText(t, r.last(t)), "progress done") {
			t.Fatalf("progress call: status %d %v", r.status, r.raw)
		}
	}
	stream, closeIt := rawGET(t, g.url, sid, "")
	progress(2, "first")
	ev := nextEvent(t, stream)
	for _, l := range ev {
		if strings.HasPrefix(l, "id:") {
			t.Fatalf("an event carries an id (%q): a client would send it back as Last-Event-ID", l)
		}
	}
	if !strings.Contains(strings.Join(ev, "\n"), `"first"`) {
		t.Fatalf("the GET stream carried %v, want the progress notification", ev)
	}
	closeIt()
	for i, v := range []string{
		strings.Repeat("9", 64<<10), "-1", "18446744073709551616", "abc", "0", "1", sid + "_0", "\xff\xfe\x80", "",
	} {
		stream, closeIt := rawGET(t, g.url, sid, "Last-Event-ID: "+v+"\r\n")
		token := fmt.Sprintf("after-%d", i)
		progress(10+i, token)
		if ev := strings.Join(nextEvent(t, stream), "\n"); !strings.Contains(ev, `"`+token+`"`) {
			t.Fatalf("Last-Event-ID %.20q: the stream's first event is %.300s, want the new progress notification (nothing replayed)", v, ev)
		}
		closeIt()
	}
	if r := g.mustPost(sid, nil, call(99, "charge", `{"amount":3}`)); !strings.Contains(resultText(t, r.last(t)), "charged 3") {
		t.Fatalf("the session after the GETs: %v", r.raw)
	}
}
