package httpback

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// closeWatch is a client connection that says when the transport closed it.
type closeWatch struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeWatch) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A pooled keep-alive connection that the server closed after the transport took it for a
// call, but before a byte of the call was written on it (a server going away, or ending an
// idle connection as the call starts): Go's transport answers "server closed idle connection"
// and, since the body may not be replayed, does not send the call on another connection. The
// call never reached the server: not sent, so its intent is released rather than fenced as
// unknown (seen in CI: a fenced call to a server that had just stopped was left unknown).
func TestPooledConnectionClosedBeforeTheWriteIsNotSent(t *testing.T) {
	// The call must take the pooled connection; about 1 run in 20 it dialled a new one (the
	// session's own requests beside it, such as its GET stream, had taken the idle one), and
	// then it is sent, as it should be on a connection nobody closed. Each try is a new server
	// and session; the claim is checked on the first that took a pooled connection.
	for try := 1; ; try++ {
		if pooledCallNotSent(t) {
			return
		}
		if try == 10 {
			t.Fatal("the call did not take a pooled connection in 10 tries")
		}
		t.Logf("try %d: the call did not take a pooled connection; again", try)
	}
}

// pooledCallNotSent is one try of TestPooledConnectionClosedBeforeTheWriteIsNotSent: false when
// the call did not take a pooled connection (nothing is checked then).
func pooledCallNotSent(t *testing.T) bool {
	t.Helper()
	f := &fake{t: t, sid: "s1", posts: map[string]int{}, headers: map[string]http.Header{}}
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	}
	srv := httptest.NewUnstartedServer(f)
	var mu sync.Mutex
	serverSide := map[string]net.Conn{} // by the client's address
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			serverSide[c.RemoteAddr().String()] = c
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &closeWatch{Conn: c, closed: make(chan struct{})}, nil
	}}}
	s := session(t, upstream(t, srv.URL, Config{Client: client}))
	if _, err := s.Call(context.Background(), "ping", nil); err != nil {
		t.Fatal(err)
	}

	reused := false
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		c, ok := info.Conn.(*closeWatch)
		if !ok || !info.Reused {
			return
		}
		reused = true
		mu.Lock()
		peer := serverSide[c.LocalAddr().String()]
		mu.Unlock()
		if peer == nil {
			t.Error("no server side for the pooled connection")
			return
		}
		peer.Close()
		select { // the transport reads the close and closes its side, before the call is written
		case <-c.closed:
		case <-time.After(30 * time.Second):
			t.Error("the transport did not notice the server's close within 30 s")
		}
	}})
	_, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"pay","arguments":{"cents":100}}`))
	if !reused {
		return false
	}
	if !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("a call on a pooled connection closed before it was written: %v; want ErrNotSent", err)
	}
	if n := f.count("tools/call"); n != 0 {
		t.Fatalf("the server saw the call %d times; want none", n)
	}
	return true
}
