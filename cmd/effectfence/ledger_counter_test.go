//go:build linux

package main

import (
	"bytes"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: the file a program writes to (a terminal to isatty) and
// the file that reads what it wrote.
func openPTY(t *testing.T) (term, reader *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return slave, master
}

// TestCounterDrawsNothingAfterItIsCleared: the count the ledger views draw on a terminal's
// stderr is drawn only by add, on the caller's goroutine. progressbar's bar of unknown length
// redrew itself every 100 ms from a goroutine of its own: that raced with clear (the race
// detector caught it in CI, in TestLedgerViewsProgressOnStderr) and drew the count again
// after clear, among the report a slow view writes after it. Here the count is left for
// 350 ms before and after clear; nothing may reach the terminal once clear has written.
func TestCounterDrawsNothingAfterItIsCleared(t *testing.T) {
	t.Parallel()
	term, reader := openPTY(t)
	c := ledgerCall{io: streams{out: &bytes.Buffer{}, err: term}}
	add, clear, ok := c.counter("ls: records")
	if !ok {
		t.Fatal("no count drawn on a terminal's stderr with stdout elsewhere")
	}
	got := make(chan []byte, 64)
	go func() {
		for {
			b := make([]byte, 4096)
			n, err := reader.Read(b)
			if n > 0 {
				got <- b[:n]
			}
			if err != nil {
				close(got)
				return
			}
		}
	}()
	add()
	add()
	time.Sleep(350 * time.Millisecond)
	clear()
	// What clear wrote, and anything drawn before it, arrives first; then the terminal must
	// stay quiet.
	var before bytes.Buffer
	drain := time.After(100 * time.Millisecond)
collect:
	for {
		select {
		case b := <-got:
			before.Write(b)
		case <-drain:
			break collect
		}
	}
	if !bytes.Contains(before.Bytes(), []byte("effectfence ledger ls: records (")) {
		t.Fatalf("the count was not drawn: %q", before.String())
	}
	select {
	case b := <-got:
		t.Errorf("drawn after clear: %q (before: %q)", b, before.String())
	case <-time.After(350 * time.Millisecond):
	}
}
