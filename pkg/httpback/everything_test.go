package httpback

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// everything runs the real @modelcontextprotocol/server-everything in its Streamable HTTP
// mode (node dist/index.js streamableHttp, port from PORT, endpoint /mcp).
type everything struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

func startEverything(t *testing.T, port int) *everything {
	t.Helper()
	script, _ := filepath.Abs("../../.peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(script); err != nil {
		t.Skip("skipping: @modelcontextprotocol/server-everything is not installed; run scripts/install-peers")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("skipping: node is not installed")
	}
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	cmd := exec.Command(node, script, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &everything{t: t, port: port, cmd: cmd}
	t.Cleanup(e.stop)
	// It says so on stderr once it listens.
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "listening on port") {
			go io.Copy(io.Discard, stderr)
			return e
		}
		t.Logf("server-everything: %s", sc.Text())
	}
	t.Fatalf("server-everything exited before listening on port %d", port)
	return nil
}

func (e *everything) url() string { return "http://127.0.0.1:" + strconv.Itoa(e.port) + "/mcp" }

func (e *everything) stop() {
	if e.cmd.ProcessState == nil {
		_ = e.cmd.Process.Kill()
		_ = e.cmd.Wait()
	}
}

var everythingInit = json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"sampling":{},"elicitation":{}},"clientInfo":{"name":"httpback-test","version":"1"}}`)

// rawPost sends one request in the session without this package and returns the result
// bytes the server wrote.
func rawPost(t *testing.T, s *Session, id int, method string, params json.RawMessage) json.RawMessage {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(jsonrpc.Request(json.RawMessage(strconv.Itoa(id)), method, params)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", s.ID())
	req.Header.Set("Mcp-Protocol-Version", s.ProtocolVersion())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("raw %s: HTTP %d %s", method, resp.StatusCode, body)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		m, err := jsonrpc.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		return m.Result
	}
	for _, ln := range strings.Split(string(body), "\n") {
		if d, ok := strings.CutPrefix(ln, "data: "); ok {
			if m, err := jsonrpc.Parse([]byte(d)); err == nil && m.IsResponse() {
				return m.Result
			}
		}
	}
	t.Fatalf("raw %s: no response in %s", method, body)
	return nil
}

func TestEverythingStreamableHTTP(t *testing.T) {
	e := startEverything(t, 0)
	var mu sync.Mutex
	var progress []string
	var asked []string
	u := upstream(t, e.url(), Config{
		Init: everythingInit,
		Log:  &testLog{t},
		OnNotification: func(method string, params json.RawMessage) {
			if method == "notifications/progress" {
				mu.Lock()
				progress = append(progress, string(params))
				mu.Unlock()
			}
		},
		OnRequest: func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			asked = append(asked, method)
			mu.Unlock()
			if method == "elicitation/create" {
				return json.RawMessage(`{"action":"accept","content":{"name":"Ada-4711"}}`), nil
			}
			if method != "sampling/createMessage" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method}
			}
			return json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"pong-4711"},"model":"httpback-test","stopReason":"endTurn"}`), nil
		},
	})
	ctx := context.Background()
	s := session(t, u)
	if !strings.Contains(string(s.InitResult()), `"mcp-servers/everything"`) || s.ID() == "" || s.ProtocolVersion() != "2025-06-18" {
		t.Fatalf("initialize: session %q version %q result %.200s", s.ID(), s.ProtocolVersion(), s.InitResult())
	}

	t.Run("tools/list bytes", func(t *testing.T) {
		got, err := s.Call(ctx, "tools/list", nil)
		if err != nil {
			t.Fatal(err)
		}
		raw := rawPost(t, s, 9001, "tools/list", nil)
		if !bytes.Equal(got, raw) {
			t.Fatalf("tools/list through httpback differs from a raw POST:\n%.300s\n%.300s", got, raw)
		}
		if !strings.Contains(string(got), `"trigger-long-running-operation"`) {
			t.Fatalf("tools/list: %.300s", got)
		}
	})

	t.Run("progress before the result", func(t *testing.T) {
		res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"trigger-long-running-operation","arguments":{"duration":0.3,"steps":3},"_meta":{"progressToken":"p-77"}}`))
		mu.Lock()
		got := append([]string(nil), progress...)
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(res), "Long running operation completed") {
			t.Fatalf("result %s", res)
		}
		if len(got) != 3 || !strings.Contains(got[2], `"progress":3`) || !strings.Contains(got[0], `"p-77"`) {
			t.Fatalf("progress delivered before the result: %q; want 3, in order", got)
		}
	})

	t.Run("sampling answered by OnRequest", func(t *testing.T) {
		res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"trigger-sampling-request","arguments":{"prompt":"ping","maxTokens":20}}`))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := append([]string(nil), asked...)
		mu.Unlock()
		if !strings.Contains(string(res), "pong-4711") || len(got) != 1 || got[0] != "sampling/createMessage" {
			t.Fatalf("result %s, requests %q; want the sampling answer in the result", res, got)
		}
	})

	t.Run("elicitation answered by OnRequest", func(t *testing.T) {
		res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"trigger-elicitation-request","arguments":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := append([]string(nil), asked...)
		mu.Unlock()
		if !strings.Contains(string(res), "Ada-4711") || len(got) != 2 || got[1] != "elicitation/create" {
			t.Fatalf("result %s, requests %q; want the elicitation answer in the result", res, got)
		}
	})

	t.Run("a JSON-RPC error", func(t *testing.T) {
		_, err := s.Call(ctx, "no/such/method", json.RawMessage(`{}`))
		var re *jsonrpc.Error
		if !errors.As(err, &re) || re.Code != jsonrpc.CodeMethodNotFound {
			t.Fatalf("%v; want method not found", err)
		}
	})

	t.Run("re-initialize after the server restarts", func(t *testing.T) {
		old := s.ID()
		e.stop()
		e2 := startEverything(t, e.port)
		_ = e2
		// The restarted server does not know the session. server-everything answers HTTP 400
		// (not the 404 of the spec): a may-have-run error that ends the session.
		_, err := s.Call(ctx, "tools/list", nil)
		if err == nil {
			t.Fatal("a call on the old session succeeded after the restart")
		}
		t.Logf("first call after the restart: %v", err)
		if errors.Is(err, mcpstdio.ErrNotSent) && !errors.Is(err, ErrSessionLost) {
			t.Fatalf("%v", err)
		}
		if u.Current() != nil {
			t.Fatal("the old session is still current")
		}
		s2 := session(t, u)
		if s2.ID() == old || s2.ID() == "" {
			t.Fatalf("new session id %q (old %q)", s2.ID(), old)
		}
		if _, err := s2.Call(ctx, "tools/list", nil); err != nil {
			t.Fatal(err)
		}
		if err := u.Close(); err != nil {
			t.Fatalf("Close (DELETE): %v", err)
		}
	})
}

// testLog sends the package's diagnostics to the test log.
type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Each protocol revision of the Streamable HTTP transport: the server checks the
// MCP-Protocol-Version header of every request after initialize against what it supports.
func TestEverythingProtocolVersions(t *testing.T) {
	e := startEverything(t, 0)
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(v, func(t *testing.T) {
			var progress int
			var mu sync.Mutex
			u := upstream(t, e.url(), Config{
				Init: json.RawMessage(`{"protocolVersion":"` + v + `","capabilities":{},"clientInfo":{"name":"httpback-test","version":"1"}}`),
				Log:  &testLog{t},
				OnNotification: func(method string, _ json.RawMessage) {
					if method == "notifications/progress" {
						mu.Lock()
						progress++
						mu.Unlock()
					}
				},
			})
			s := session(t, u)
			if s.ProtocolVersion() != v {
				t.Fatalf("negotiated %q; offered %q", s.ProtocolVersion(), v)
			}
			res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"trigger-long-running-operation","arguments":{"duration":0.1,"steps":2},"_meta":{"progressToken":7}}`))
			mu.Lock()
			n := progress
			mu.Unlock()
			if err != nil || !strings.Contains(string(res), "completed") || n != 2 {
				t.Fatalf("result %s, %v, %d progress notifications before it", res, err, n)
			}
			if err := u.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
