package httpfront_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// docs/gateway.md, Endpoints: one GET stream per session, a second takes over. A client whose
// GET stream broke opens another, which is served whether or not the gateway has seen the
// first one end, and carries the server's messages from then on (here a progress
// notification of a call answered as plain JSON, which only the GET stream can take).
func TestGETStreamReopensAfterADrop(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	_, drop := openGET(t, g, sid)
	drop() // the client's stream breaks
	resp, _ := openGET(t, g, sid)
	r := g.mustPost(sid, hdr{"Accept": "application/json"}, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"progress","arguments":{"n":1},"_meta":{"progressToken":"reopened"}}}`)
	if r.status != http.StatusOK || !strings.Contains(resultText(t, r.last(t)), "progress done") {
		t.Fatalf("progress call: status %d %v", r.status, r.raw)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if !strings.Contains(d, `"notifications/progress"`) || !strings.Contains(d, `"reopened"`) {
				t.Fatalf("the reopened GET stream carried %s, want the progress notification", d)
			}
			return
		}
	}
	t.Fatalf("the reopened GET stream ended without a message: %v", sc.Err())
}

// docs/gateway.md, Endpoints: a GET of a session that has a GET stream open takes the stream
// over, ending the old one. The real TypeScript SDK client holds a session through a TCP
// proxy that is then cut as a middlebox that lost its state cuts it: the client's side of
// every connection is closed, the gateway's is left open and silent, so the gateway cannot see
// the stream end. The client opens its GET stream again, and a request the server then sends
// it (roots/list) reaches it and is answered. Before, the gateway answered that GET 409 while
// it held the dead stream, the SDK gave up after two more tries, and every later message of
// the server's, its requests included, went to the dead stream and was lost.
func TestReconnectedGETStreamTakesOver(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	if _, err := os.Stat(filepath.Join(peers, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
		t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gateway := startProcess(t, "gateway", "effectfence wrap: listening on ", mcptest.Env(filepath.Join(dir, "effects"), ""),
		binary(t), "wrap", "--listen", "127.0.0.1:0", "--ledger", filepath.Join(dir, "ledger.db"), "--grace", "500ms", "--", exe, "-test.run=^$")
	proxy := startCutProxy(t, strings.TrimSuffix(strings.TrimPrefix(gateway.url, "http://"), "/mcp"))

	node := exec.Command("node", filepath.Join("testdata", "reconnect_client.mjs"))
	node.Env = append(os.Environ(), "PEERS="+peers, "URL=http://"+proxy.addr()+"/mcp")
	stdin, err := node.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &logBuf{}
	node.Stdout, node.Stderr = out, out
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := node.Wait(); err != nil {
			t.Errorf("node client: %v\n%s", err, out.String())
		}
	})
	sid := ""
	for deadline := time.Now().Add(30 * time.Second); sid == ""; time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(out.String(), "\n") {
			if s, ok := strings.CutPrefix(l, "session "); ok {
				sid = s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SDK client did not connect:\n%s", out.String())
		}
	}
	g := &gw{t: t, url: gateway.url}
	// Its GET stream is open once a message of the server's sent on it reaches it.
	ask := func(tag string) string {
		r := g.mustPost(sid, hdr{"Accept": "application/json"}, call(2, "ask", `{"ms":2000,"tag":"`+tag+`"}`))
		if r.status != http.StatusOK {
			t.Fatalf("ask: status %d %v", r.status, r.raw)
		}
		return resultText(t, r.last(t))
	}
	answered := func(prefix string) {
		t.Helper()
		for i := 0; ; i++ {
			gaveUp := strings.Contains(out.String(), "Maximum reconnection attempts")
			if text := ask(fmt.Sprintf("%s-%d", prefix, i)); strings.Contains(text, "effectfence-reconnected") {
				return
			}
			if gaveUp || i == 30 {
				t.Fatalf("the server's roots/list did not reach the SDK client (%s); the client printed:\n%s", prefix, out.String())
			}
		}
	}
	answered("before")
	proxy.cut()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "SSE stream disconnected"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) { // the client sees its GET stream break
			t.Fatalf("the SDK client did not see its GET stream cut:\n%s", out.String())
		}
	}
	answered("after")
	if strings.Contains(out.String(), "Conflict") {
		t.Fatalf("the client's GET was refused 409:\n%s", out.String())
	}
}

// cutProxy forwards TCP connections to a gateway, and can cut them as a middlebox that lost
// their state does: the client's side is closed, the gateway's side left open and silent.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	pairs  map[*proxyPair]struct{}
	kept   []net.Conn // the gateway's side of the pairs cut, held open until the test ends
}

type proxyPair struct {
	client, server net.Conn
	cut            bool // guarded by cutProxy.mu
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, pairs: map[*proxyPair]struct{}{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			pr := &proxyPair{client: c, server: s}
			p.mu.Lock()
			p.pairs[pr] = struct{}{}
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(s, c); p.ended(pr) }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, s); p.ended(pr) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for pr := range p.pairs {
			pr.client.Close()
			pr.server.Close()
		}
		for _, c := range p.kept {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// ended closes both sides of a pair one of whose sides ended, unless it was cut: then the
// gateway's side stays open.
func (p *cutProxy) ended(pr *proxyPair) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pairs[pr]; !ok {
		return
	}
	delete(p.pairs, pr)
	pr.client.Close()
	if !pr.cut {
		pr.server.Close()
	}
}

// cut closes the client's side of every connection open, leaving the gateway's side open.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pr := range p.pairs {
		pr.cut = true
		p.kept = append(p.kept, pr.server)
		pr.client.Close()
	}
}
