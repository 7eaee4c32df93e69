package main

import (
	"net"
	"net/http"
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
