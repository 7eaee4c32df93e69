package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConnLimitTakesAConnectionThatWentIdleWhileAcceptWaited: every slot is taken by a
// connection still being answered, so Accept finds none idle and waits; one of them then goes
// idle (its response written, kept alive). Accept must close it and take the new connection.
// Before, it waited for a connection to close, which a keep-alive client never does: under a
// flood the new agent waited as long as the flood stayed connected.
func TestConnLimitTakesAConnectionThatWentIdleWhileAcceptWaited(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimit(ln, 2)
	defer l.Close()
	var held []net.Conn
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range 2 {
		dial()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		l.connState(c, http.StateNew)
		l.connState(c, http.StateActive)
		held = append(held, c)
	}
	newcomer := dial()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	// Accept has found every slot taken and none idle (or will: either order must end the
	// same way). Now the first connection's response is written and it stays open, idle.
	time.Sleep(50 * time.Millisecond)
	l.connState(held[0], http.StateIdle)
	select {
	case c := <-accepted:
		if c == nil {
			t.Fatal("Accept failed")
		}
		if c.RemoteAddr().String() != newcomer.LocalAddr().String() {
			t.Fatalf("accepted %v, want the newcomer %v", c.RemoteAddr(), newcomer.LocalAddr())
		}
		c.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("Accept still waits 30 s after a connection went idle: the newcomer is never served while the others stay connected")
	}
	// The idle connection was closed to make room.
	_ = held[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := held[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("the idle connection was not closed to make room")
	}
}

// TestHeadBudgetCountsHeadsAlone: the heads' budget counts a request's head while it is read,
// and nothing after: a keep-alive client's many requests, each head well under the budget and
// all together far over it, and a body many times the budget, are all served, and once the
// connection is idle the budget holds nothing. A head over the budget closes its connection
// without an answer.
func TestHeadBudgetCountsHeadsAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimit(ln, 8)
	l.headMax = 64 << 10
	srv := &http.Server{
		Handler: l.headsRead(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d", n)
		})),
		ConnState: l.connState, ConnContext: l.connContext, ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(l)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	url := "http://" + ln.Addr().String() + "/"
	post := func(pad, body int) (string, error) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(strings.Repeat("b", body)))
		req.Header.Set("X-Pad", strings.Repeat("p", pad))
		res, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return string(b), err
	}
	for i := range 100 { // 100 heads of 4 KB: 400 KB on one connection
		if got, err := post(4<<10, 10); err != nil || got != "10" {
			t.Fatalf("request %d of a keep-alive client: %q, %v", i, got, err)
		}
	}
	if got, err := post(100, 1<<20); err != nil || got != fmt.Sprint(1<<20) {
		t.Fatalf("a body of 1 MiB: %q, %v", got, err)
	}
	for deadline := time.Now().Add(10 * time.Second); l.heads.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the budget holds %d bytes with every connection idle", l.heads.Load())
		}
	}
	if got, err := post(100<<10, 10); err == nil {
		t.Fatalf("a head of 100 KB, over a budget of 64 KB, was answered %q", got)
	}
	if got, err := post(100, 10); err != nil || got != "10" {
		t.Fatalf("a request after the refused head: %q, %v", got, err)
	}
}

// TestHeadBudgetClosesTheLargestHead: with the budget taken by large unfinished heads (a
// slow flood), an ordinary client's request is served, and one of the flood's connections is
// closed in its place: before, the connection whose read came once the budget was full was
// closed, so every ordinary client lost its request for as long as the flood lasted.
func TestHeadBudgetClosesTheLargestHead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimit(ln, 16)
	l.headMax = 64 << 10
	srv := &http.Server{
		Handler:   l.headsRead(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "served") })),
		ConnState: l.connState, ConnContext: l.connContext, ReadHeaderTimeout: 60 * time.Second,
	}
	go srv.Serve(l)
	defer srv.Close()
	var flood []net.Conn
	for range 3 { // 3 heads of 20 KB, never finished: 60 of the 64 KB
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 20<<10))); err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	for deadline := time.Now().Add(30 * time.Second); l.heads.Load() < 60<<10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the flood's heads hold %d bytes of the budget, want 60 KB", l.heads.Load())
		}
	}
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/", nil)
	req.Header.Set("X-Pad", strings.Repeat("q", 8<<10)) // 60 + 8 KB: over the budget
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("an ordinary request during the flood: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "served" {
		t.Fatalf("an ordinary request during the flood: %q", b)
	}
	closed := 0
	for _, c := range flood {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("%d of the flood's 3 connections closed; want 1, to make room for the request", closed)
	}
}

// recConn is the connection under a limitedConn: it records whether a handler had already
// started on it (headsRead's headDone(true)) when it was closed.
type recConn struct {
	net.Conn
	lc              *limitedConn
	closed          atomic.Bool
	handlingAtClose atomic.Bool
}

func (r *recConn) Close() error {
	r.closed.Store(true)
	if r.lc.mu.TryLock() { // held only by a closer that checked handling itself
		h := r.lc.handling
		r.lc.mu.Unlock()
		if h {
			r.handlingAtClose.Store(true)
		}
	}
	return nil
}

func fakeConn(l *connLimit) (*limitedConn, *recConn) {
	lc := &limitedConn{l: l}
	rc := &recConn{lc: lc}
	lc.Conn = rc
	l.slots <- struct{}{}
	l.mu.Lock()
	l.open[lc] = struct{}{}
	l.mu.Unlock()
	return lc, rc
}

// TestHeadBudgetNeverClosesAConnectionWhoseHandlerStarted: B's head (80 of a budget of 100)
// has been read whole and its handler starts (headsRead: headDone(true)) while A's read of
// 30 bytes goes over the budget. Either B is closed for its head and its handler does not
// run, or its handler runs and B is not closed under it: a handler that runs on a connection
// closed for its head serves a request (it may be forwarded, and have effects) whose client
// was already cut off without an answer.
func TestHeadBudgetNeverClosesAConnectionWhoseHandlerStarted(t *testing.T) {
	bad := 0
	const rounds = 20000
	for range rounds {
		l := newConnLimit(nil, 4)
		l.headMax = 100
		a, _ := fakeConn(l)
		b, rb := fakeConn(l)
		if !b.count(80) {
			t.Fatal("80 bytes of 100 refused")
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; a.count(30) }()
		go func() { defer wg.Done(); <-start; b.headDone(true) }()
		close(start)
		wg.Wait()
		b.mu.Lock()
		runs := b.handling // headsRead lets the handler run
		b.mu.Unlock()
		if rb.closed.Load() && (runs || rb.handlingAtClose.Load()) {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("in %d of %d rounds a connection was closed for its head and its handler ran (or had started)", bad, rounds)
	}
}

// TestHeadBudgetReadAfterCloseIsNotCounted: a read that returned data just before the
// connection was closed (by another connection's count) is counted after Close gave the head
// back: the bytes stay in the budget, under a connection no longer open, which no one can
// close to take them back.
func TestHeadBudgetReadAfterCloseIsNotCounted(t *testing.T) {
	l := newConnLimit(nil, 4)
	l.headMax = 100
	b, _ := fakeConn(l)
	_ = b.Close()
	b.count(40)
	if h := l.heads.Load(); h != 0 {
		t.Errorf("the budget holds %d bytes of a closed connection", h)
	}
}
