package jsonrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// request is a tools/call line of about n bytes with id.
func request(id, n int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"x","arguments":{"pad":"%s"}}}`, id, strings.Repeat("p", n))
}

// A metered Reader: a line up to the free size takes nothing; a longer one holds its own
// length (not the most a line may have) until the caller gives it back; a line longer than
// the whole pool still passes when nothing else is held, holding the whole pool.
func TestMeteredLineHoldsItsLength(t *testing.T) {
	pool := budget.NewPool(1 << 20)
	small, large, larger := request(1, 100), request(2, 300<<10), request(3, 3<<20)
	r := NewReader(strings.NewReader(small+"\n"+large+"\n"+larger+"\n"), 4<<20)
	r.Meter(context.Background(), pool, 64<<10, time.Second)

	if line, err := r.ReadLine(); err != nil || string(line) != small || r.Held() != 0 {
		t.Fatalf("a small line: %.40q %v, holding %d; want it, holding nothing", line, err, r.Held())
	}
	line, err := r.ReadLine()
	if err != nil || string(line) != large || r.Held() != int64(len(large)) {
		t.Fatalf("a large line: %.40q %v, holding %d; want it, holding its %d bytes", line, err, r.Held(), len(large))
	}
	if now, most := pool.Used(); now != int64(len(large)) || most != pool.Total() {
		t.Fatalf("the pool: %d taken, at most %d; want the line's %d, and the whole pool while it was read", now, most, len(large))
	}
	pool.Release(r.Held())
	// Had it waited for more than the pool, it would have been skipped (ErrNoRoom) after the
	// Meter's wait: that it is read, holding the whole pool, is what shows it did not.
	line, err = r.ReadLine()
	if err != nil || string(line) != larger || r.Held() != pool.Total() {
		t.Fatalf("a line larger than the pool, nothing else held: %.40q %v, holding %d; want it, holding the whole pool", line, err, r.Held())
	}
	pool.Release(r.Held())
	if _, err := r.ReadLine(); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
	if now, _ := pool.Used(); now != 0 {
		t.Fatalf("%d bytes of the pool still taken", now)
	}
}

// While the pool is full the Reader does not read past the free size of a large line: it
// waits (back-pressure), and reads on as soon as room is given back. A line that finds no room
// within the wait is skipped unread (ErrNoRoom), its request id read as it went by, and the
// next line is read as usual; a line too long is skipped holding nothing. When the Reader's
// context ends during a wait, ReadLine returns its error.
func TestMeteredReaderWaitsThenSkips(t *testing.T) {
	pool := budget.NewPool(1 << 20)
	pr, pw := io.Pipe()
	defer pr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewReader(pr, 2<<20)
	r.Meter(ctx, pool, 64<<10, 400*time.Millisecond)
	go func() {
		for _, l := range []string{request(1, 200<<10), request(2, 200<<10), `{"jsonrpc":"2.0","id":3,"method":"ping"}`, request(4, 3<<20), request(5, 200<<10)} {
			if _, err := io.WriteString(pw, l+"\n"); err != nil {
				return
			}
		}
	}()

	if !pool.Acquire(context.Background(), pool.Total(), 0) {
		t.Fatal("cannot fill the pool")
	}
	go func() { time.Sleep(200 * time.Millisecond); pool.Release(pool.Total()) }()
	start := time.Now()
	line, err := r.ReadLine()
	if err != nil || !strings.Contains(string(line), `"id":1,`) || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("a large line while the pool was full for 200 ms: %.40q %v after %s; want it once there was room", line, err, time.Since(start))
	}
	held := r.Held()
	start = time.Now()
	line, err = r.ReadLine()
	if !errors.Is(err, ErrNoRoom) || line != nil || string(r.SkippedRequestID()) != "2" || time.Since(start) < 350*time.Millisecond {
		t.Fatalf("a large line while the first held the pool: %.40q %v (request %s) after %s; want ErrNoRoom for request 2 after the wait", line, err, r.SkippedRequestID(), time.Since(start))
	}
	if now, _ := pool.Used(); now != held {
		t.Fatalf("after the skip the pool holds %d, want the first line's %d", now, held)
	}
	if line, err := r.ReadLine(); err != nil || !strings.Contains(string(line), `"id":3,`) || r.Held() != 0 {
		t.Fatalf("the small line after it: %.40q %v (holding %d)", line, err, r.Held())
	}
	pool.Release(held)
	if line, err := r.ReadLine(); err != ErrTooLong || line != nil || string(r.SkippedRequestID()) != "4" {
		t.Fatalf("a line too long: %.40q %v (request %s)", line, err, r.SkippedRequestID())
	}
	if now, _ := pool.Used(); now != 0 {
		t.Fatalf("a line too long, skipped, holds %d bytes of the pool", now)
	}
	pool.Acquire(context.Background(), pool.Total(), 0)
	defer pool.Release(pool.Total())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	if _, err := r.ReadLine(); !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ended: %v", err)
	}
}
