package wrap

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// TestListChangedRefreshesOneAtATimeAndStops: a burst of list_changed from the delivery
// goroutine returns at once, causes listings one at a time (coalesced), settled waits for
// them, and shutdown leaves no goroutine and starts none after.
func TestListChangedRefreshesOneAtATimeAndStops(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, err := mcpstdio.Start(context.Background(), mcpstdio.Config{
		Command: []string{exe, "-test.run=^$"}, Env: mcptest.Env(filepath.Join(t.TempDir(), "effects"), ""),
		Stderr: os.Stderr, InitTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var c toolCache
	var inside, most, listings atomic.Int32
	session := func() Conn {
		listings.Add(1)
		n := inside.Add(1)
		defer inside.Add(-1)
		time.Sleep(time.Millisecond) // two loops at once would overlap here
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return s
	}
	logf := func(f string, a ...any) { t.Errorf("unexpected log: "+f, a...) }
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); c.changed(session, logf) }()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.settled(ctx)
	if ctx.Err() != nil {
		t.Fatal("the listing after list_changed never finished")
	}
	if _, ok, loaded := c.get("charge"); !ok || !loaded {
		t.Fatal("the listing did not reach the cache")
	}
	if n := listings.Load(); n < 1 || n > 50 || most.Load() != 1 {
		t.Fatalf("%d listings, at most %d at once", n, most.Load())
	}
	c.shutdown()
	c.changed(session, logf)
	c.changes.mu.Lock()
	idle := c.changes.idle
	c.changes.mu.Unlock()
	if idle != nil {
		t.Fatal("a listing started after shutdown")
	}
}

// TestParseToolsAllocationIsLinear: a listing's cost in memory is a small multiple of its
// size, however many properties its schemas have (keyLike built a strings.Replacer for each
// one: a listing of 1 MB with 32,768 properties allocated 227 MB, 8 MB 1.8 GB). Bytes
// allocated are counted, not time.
func TestParseToolsAllocationIsLinear(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tools":[{"name":"t","inputSchema":{"type":"object","properties":{`)
	for i := range 32768 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%09d":{"type":"string"}`, i)
	}
	b.WriteString(`,"request-ID":{"type":"string"}}}}]}`)
	in := []byte(b.String())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tools, _, err := parseTools(in)
	runtime.ReadMemStats(&after)
	if err != nil || tools["t"].keyProp != "request-ID" {
		t.Fatalf("%v %+v", err, tools)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(16*len(in)) {
		t.Fatalf("a listing of %d bytes allocated %d bytes", len(in), alloc)
	}
}

// TestToolCacheIsBounded: the pages the agent fetches from a server whose listing never ends
// fill the cache up to maxTools names and no further; names it already knows are still
// updated, the first page of a new listing starts it afresh, and the overflow is reported once.
func TestToolCacheIsBounded(t *testing.T) {
	var c toolCache
	page := func(from, n int) map[string]toolInfo {
		p := make(map[string]toolInfo, n)
		for i := from; i < from+n; i++ {
			p[fmt.Sprintf("tool-%d", i)] = toolInfo{}
		}
		return p
	}
	const per = 10000
	reported := 0
	for i := 0; i < 2*maxTools/per; i++ {
		if c.merge(page(i*per, per), i == 0) {
			reported++
		}
	}
	if len(c.tools) != maxTools || reported != 1 {
		t.Fatalf("after %d names in pages: %d kept, overflow reported %d times; want %d kept, reported once", 2*maxTools, len(c.tools), reported, maxTools)
	}
	c.merge(map[string]toolInfo{"tool-1": {keyProp: "request_id"}}, false)
	if info, ok, _ := c.get("tool-1"); !ok || info.keyProp != "request_id" {
		t.Fatal("a known tool was not updated once the cache was full")
	}
	c.merge(page(0, 3), true)
	if len(c.tools) != 3 {
		t.Fatalf("a new listing's first page kept %d names, want 3", len(c.tools))
	}
}

// TestToolListedTwiceStaysFenced: a tool named twice in one page, or on two pages of one
// listing, is read-only only when every entry says readOnlyHint, in either order; the last
// entry read used to decide alone.
func TestToolListedTwiceStaysFenced(t *testing.T) {
	const writes, reads = `{"name":"t","inputSchema":{"type":"object"}}`, `{"name":"t","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`
	for _, c := range []struct {
		a, b     string
		readOnly bool
	}{{writes, reads, false}, {reads, writes, false}, {reads, reads, true}} {
		tools, _, err := parseTools([]byte(`{"tools":[` + c.a + `,` + c.b + `]}`))
		if err != nil || tools["t"].readOnly != c.readOnly {
			t.Errorf("one page listing %s then %s: %+v %v; want readOnly %v", c.a, c.b, tools, err, c.readOnly)
		}
		var cache toolCache
		p1, _, _ := parseTools([]byte(`{"tools":[` + c.a + `]}`))
		p2, _, _ := parseTools([]byte(`{"tools":[` + c.b + `]}`))
		cache.merge(p1, true)
		cache.merge(p2, false)
		if info, _, _ := cache.get("t"); info.readOnly != c.readOnly {
			t.Errorf("two pages listing %s then %s: readOnly %v, want %v", c.a, c.b, info.readOnly, c.readOnly)
		}
	}
}
