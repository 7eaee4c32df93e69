package jsonrpc

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// gate is an io.Writer that records each write call and, while held, blocks every write until
// it is released: the test decides when a write in progress returns.
type gate struct {
	mu      sync.Mutex
	calls   [][]byte
	entered chan struct{} // a value per write call, sent when the call starts
	release chan struct{} // a write call returns after receiving from it
	fail    map[int]error // the n-th call (0-based) fails with this error, writing nothing
	wrote   map[int]int   // ... or having written this many bytes first
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 1000), release: make(chan struct{}), fail: map[int]error{}, wrote: map[int]int{}}
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	n := len(g.calls)
	g.calls = append(g.calls, bytes.Clone(p))
	err, k := g.fail[n], g.wrote[n]
	g.mu.Unlock()
	g.entered <- struct{}{}
	<-g.release
	if err != nil {
		return min(k, len(p)), err
	}
	return len(p), nil
}

func (g *gate) written() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// waitGathered waits until the Writer holds n lines gathered for its next write.
func waitGathered(t *testing.T, w *Writer, n int) {
	t.Helper()
	for {
		w.mu.Lock()
		got := bytes.Count(w.next, []byte("\n"))
		w.mu.Unlock()
		if got == n {
			return
		}
		if got > n {
			t.Fatalf("%d lines gathered, want %d", got, n)
		}
		runtime.Gosched()
	}
}

// Lines written while a write is in progress go out together in the next write call, in the
// order they arrived, and each Write returns only once its own line was written.
func TestWriterGathersLinesSentDuringAWrite(t *testing.T) {
	g := newGate()
	w := NewWriter(g)
	first := make(chan error, 1)
	go func() { first <- w.Write([]byte(`{"id":0}`)) }()
	<-g.entered // the first write is in progress and held

	const n = 10
	results := make([]chan error, n)
	for i := range n {
		results[i] = make(chan error, 1)
		go func() { results[i] <- w.Write(fmt.Appendf(nil, `{"id":%d}`, i+1)) }()
		waitGathered(t, w, i+1) // one at a time, so the order is known
	}
	for i := range n {
		select {
		case err := <-results[i]:
			t.Fatalf("line %d returned (%v) before any write carried it", i+1, err)
		default:
		}
	}
	g.release <- struct{}{} // the first write returns; its goroutine writes the gathered lines
	<-g.entered
	for i := range n {
		select {
		case err := <-results[i]:
			t.Fatalf("line %d returned (%v) while the write carrying it was held", i+1, err)
		default:
		}
	}
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := <-results[i]; err != nil {
			t.Fatal(err)
		}
	}
	calls := g.written()
	if len(calls) != 2 {
		t.Fatalf("%d write calls, want 2 (the first line, then the %d gathered): %q", len(calls), n, calls)
	}
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "{\"id\":%d}\n", i+1)
	}
	if string(calls[0]) != "{\"id\":0}\n" || string(calls[1]) != want.String() {
		t.Fatalf("writes %q, want %q then %q", calls, "{\"id\":0}\n", want.String())
	}
}

// A write that fails fails every Write whose line it carried, and only those.
func TestWriterFailedWriteReachesItsLines(t *testing.T) {
	g := newGate()
	boom := errors.New("broken pipe")
	g.fail[1] = boom // the gathered write fails
	w := NewWriter(g)
	first := make(chan error, 1)
	go func() { first <- w.Write([]byte(`a`)) }()
	<-g.entered
	gathered := make(chan error, 2)
	for i := range 2 {
		go func() { gathered <- w.Write([]byte(`b`)) }()
		waitGathered(t, w, i+1)
	}
	g.release <- struct{}{}
	<-g.entered
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatalf("first line: %v, want nil (its own write succeeded)", err)
	}
	for range 2 {
		if err := <-gathered; !errors.Is(err, boom) {
			t.Fatalf("gathered line: %v, want %v", err, boom)
		}
	}
	// The Writer goes on: the next line is written on its own.
	go func() { first <- w.Write([]byte(`c`)) }()
	<-g.entered
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if calls := g.written(); len(calls) != 3 || string(calls[2]) != "c\n" {
		t.Fatalf("writes %q", calls)
	}
}

// A write that fails part way fails only the lines it did not write whole: a line whose text
// went out (the reader may have read it, and run a request) is delivered, its newline or not.
// Before, each of them got the error, and a request the server had read was reported not sent.
func TestWriterPartlyFailedWriteDeliversTheLinesItWrote(t *testing.T) {
	g := newGate()
	boom := errors.New("broken pipe")
	// The gathered write "aa\nbbb\ncc\n" stops after "aa\nbbb" (the last newline of bbb
	// missing) and half of cc.
	g.fail[1], g.wrote[1] = boom, len("aa\nbbb")
	w := NewWriter(g)
	first := make(chan error, 1)
	go func() { first <- w.Write([]byte(`x`)) }()
	<-g.entered
	res := make([]chan error, 3)
	for i, line := range []string{"aa", "bbb", "cc"} {
		res[i] = make(chan error, 1)
		go func() { res[i] <- w.Write([]byte(line)) }()
		waitGathered(t, w, i+1)
	}
	g.release <- struct{}{}
	<-g.entered
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-res[0]; err != nil {
		t.Fatalf("a line written whole: %v, want nil", err)
	}
	if err := <-res[1]; err != nil {
		t.Fatalf("a line whose text was written, not its newline: %v, want nil", err)
	}
	if err := <-res[2]; !errors.Is(err, boom) {
		t.Fatalf("a line written in part: %v, want %v", err, boom)
	}
}

// Many goroutines at once: every line arrives once and whole, each goroutine's lines in the
// order it sent them.
func TestWriterConcurrentLinesStayWhole(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	var calls int
	w := NewWriter(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return out.Write(p)
	}))
	const goroutines, each = 16, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Sizes vary, some over the reused buffer's bound.
				pad := strings.Repeat("x", (g*each+i)%97*(1+(i%50)/49*1000))
				if err := w.Write(fmt.Appendf(nil, `{"g":%d,"i":%d,"pad":%q}`, g, i, pad)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	next := make([]int, goroutines)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(lines), goroutines*each)
	}
	for _, l := range lines {
		var g, i int
		if _, err := fmt.Sscanf(l, `{"g":%d,"i":%d,`, &g, &i); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d: line %d came after line %d", g, i, next[g]-1)
		}
		next[g]++
	}
	t.Logf("%d lines in %d write calls", len(lines), calls)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
