package httpfront_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/store"
)

// The gateway's benchmarks: what `wrap --listen` adds over calling the server directly, in the
// same run. The server is the mcptest server: directly, serving Streamable HTTP itself
// (MCPTEST_HTTP); through the gateway, as the stdio child of `effectfence wrap --listen` with a
// durable SQLite ledger (the default), or, with EFFECTFENCE_BENCH_UPSTREAM=1, behind
// `wrap --listen --upstream` reaching that same HTTP server. Each sub-benchmark reports p50 and
// p99 of one call (sequential) or calls/s (64 callers), as custom metrics:
//
//	go test -run '^$' -bench Gateway -benchtime 2000x ./pkg/httpfront
//
// The tool is "echo": fenced (it has no readOnlyHint) and free (it records nothing), so the
// figures are the fence's and the transport's, not the tool's.

// startProc runs argv with env until the benchmark ends and returns the URL it logs after
// prefix on stderr.
func startProc(b *testing.B, env []string, prefix string, argv ...string) (string, func()) {
	b.Helper()
	u, stop, err := startProcE(env, prefix, argv...)
	if err != nil {
		b.Fatal(err)
	}
	return u, stop
}

// startProcE starts argv with env and returns the URL it logs after prefix on stderr, and a
// function that kills it.
func startProcE(env []string, prefix string, argv ...string) (string, func(), error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				select {
				case urls <- u:
				default:
				}
			}
		}
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	select {
	case u := <-urls:
		return u, stop, nil
	case <-time.After(60 * time.Second):
		stop()
		return "", nil, fmt.Errorf("%v did not start", argv)
	}
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 0}}
}

// rpc posts one message and returns the body (JSON, or the SSE stream read to its end).
func rpc(c *http.Client, url, sid, body string) (string, http.Header, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return string(b), resp.Header, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), resp.Header, err
}

func openSession(b *testing.B, c *http.Client, url string) string {
	b.Helper()
	_, h, err := rpc(c, url, "", initBody)
	if err != nil {
		b.Fatal(err)
	}
	sid := h.Get("Mcp-Session-Id")
	if _, _, err := rpc(c, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		b.Fatal(err)
	}
	return sid
}

func exe(b *testing.B) string {
	b.Helper()
	p, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// direct starts the mcptest server serving HTTP.
func direct(b *testing.B) (string, func()) {
	env := append(mcptest.Env(filepath.Join(b.TempDir(), "effects"), ""), mcptest.EnvHTTP+"=127.0.0.1:0")
	return startProc(b, env, "mcptest: listening on ", exe(b), "-test.run=^$")
}

// gateway starts `effectfence wrap --listen` on ledger: over the stdio child, or in front of
// upstream when it is not "".
func gateway(b *testing.B, ledger, upstream string) (string, func()) {
	bin := binary(b)
	args := []string{bin, "wrap", "--ledger", ledger, "--scope", "bench", "--listen", "127.0.0.1:0", "--max-sessions", "1000"}
	if upstream != "" {
		args = append(args, "--upstream", upstream)
	} else {
		args = append(args, "--", exe(b), "-test.run=^$")
	}
	return startProc(b, mcptest.Env(filepath.Join(b.TempDir(), "effects"), ""), "effectfence wrap: listening on ", args...)
}

// latencies runs n sequential calls made by body(i) and reports p50 and p99.
func latencies(b *testing.B, url string, body func(i int) string) {
	c := benchClient()
	sid := openSession(b, c, url)
	if _, _, err := rpc(c, url, sid, body(-1)); err != nil { // warm: a first execution
		b.Fatal(err)
	}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		out, _, err := rpc(c, url, sid, body(i))
		d = append(d, time.Since(t0))
		if err != nil || !strings.Contains(out, "echo ") {
			b.Fatalf("call %d: %v %s", i, err, out)
		}
	}
	b.StopTimer()
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// throughput runs b.N distinct calls from 64 callers spread over the urls (a session each)
// and reports calls/s.
func throughput(b *testing.B, urls []string, tag string) {
	const callers = 64
	c := benchClient()
	sids := make([]string, callers)
	for i := range sids {
		sids[i] = openSession(b, c, urls[i%len(urls)])
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s-%d"}}}`, i, tag, i)
				if out, _, err := rpc(c, urls[w%len(urls)], sids[w], body); err != nil || !strings.Contains(out, "echo ") {
					b.Errorf("call %d: %v %s", i, err, out)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "calls/s")
}

func echo(i int, text string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q}}}`, i+2, text)
}

func BenchmarkGateway(b *testing.B) {
	upstream := os.Getenv("EFFECTFENCE_BENCH_UPSTREAM") != ""
	run := 0
	start := func(b *testing.B, ledger string) (string, func()) {
		if !upstream {
			return gateway(b, ledger, "")
		}
		u, stopU := direct(b)
		g, stopG := gateway(b, ledger, u)
		return g, func() { stopG(); stopU() }
	}
	newLedger := func(b *testing.B) string {
		run++
		if l := os.Getenv("EFFECTFENCE_BENCH_LEDGER"); l != "" {
			return l
		}
		return filepath.Join(b.TempDir(), fmt.Sprintf("ledger-%d.db", run))
	}
	b.Run("replay/direct", func(b *testing.B) {
		u, stop := direct(b)
		defer stop()
		latencies(b, u, func(int) string { return echo(0, "same") })
	})
	b.Run("replay/gateway", func(b *testing.B) {
		u, stop := start(b, newLedger(b))
		defer stop()
		latencies(b, u, func(int) string { return echo(0, "same") })
	})
	b.Run("fresh/direct", func(b *testing.B) {
		u, stop := direct(b)
		defer stop()
		latencies(b, u, func(i int) string { return echo(i, fmt.Sprintf("fresh-%d", i)) })
	})
	b.Run("fresh/gateway", func(b *testing.B) {
		u, stop := start(b, newLedger(b))
		defer stop()
		latencies(b, u, func(i int) string { return echo(i, fmt.Sprintf("fresh-%d", i)) })
	})
	b.Run("fresh/ledger-only", func(b *testing.B) {
		// The ledger's own cost of a fresh call in the same run: admission and commit of a
		// wrap-shaped call on a SQLite file (the same durability), no transport.
		led, err := store.Open(context.Background(), store.Options{Ledger: newLedger(b)})
		if err != nil {
			b.Fatal(err)
		}
		defer led.Close()
		d := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			args := []byte(fmt.Sprintf(`{"text":"fresh-%d"}`, i))
			t0 := time.Now()
			adm, err := led.Prepare(context.Background(), fence.Request{Intent: fmt.Sprintf("wrap:echo:%064d", i), Tool: "echo", Args: args, ExactArgs: args, Agent: "bench"})
			if err != nil || !adm.Fresh() {
				b.Fatal(err)
			}
			if _, err := led.Commit(context.Background(), *adm.Ticket, []byte(fmt.Sprintf(`{"content":[{"type":"text","text":"echo fresh-%d"}],"isError":false}`, i))); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		b.StopTimer()
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
	})
	b.Run("64callers/direct", func(b *testing.B) {
		u, stop := direct(b)
		defer stop()
		throughput(b, []string{u}, "d")
	})
	b.Run("64callers/gateway-1", func(b *testing.B) {
		u, stop := start(b, newLedger(b))
		defer stop()
		throughput(b, []string{u}, "g1")
	})
	b.Run("64callers/gateway-3", func(b *testing.B) {
		ledger := newLedger(b)
		var urls []string
		for range 3 {
			u, stop := start(b, ledger)
			defer stop()
			urls = append(urls, u)
		}
		throughput(b, urls, "g3")
	})
}
