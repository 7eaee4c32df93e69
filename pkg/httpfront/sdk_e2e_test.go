package httpfront_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
)

// TestRealSDKClientThroughGateway: the MCP TypeScript SDK's Streamable HTTP client
// (testdata/gateway_client.mjs) against server-everything twice, directly in the server's own
// streamableHttp mode and through `effectfence wrap --listen -- mcp-server-everything`: tools,
// resources (and subscriptions), prompts, logging, progress, sampling, elicitation, roots,
// cancellation and tasks behave alike; through the gateway, identical calls of fenced tools
// run once, and a call whose response stream broke mid-call, re-sent, runs once and gets the
// recorded result.
func TestRealSDKClientThroughGateway(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	everything := filepath.Join(peers, "node_modules/.bin/mcp-server-everything")
	for _, p := range []string{filepath.Join(peers, "node_modules/@modelcontextprotocol/sdk/package.json"), everything} {
		if _, err := os.Stat(p); err != nil {
			t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	direct := startEverythingHTTP(t, everything)
	// echo and get-structured-content are annotated read-only: fence them to see replays.
	// trigger-long-running-operation stays a pass-through call (progress, cancellation).
	gateway := startProcess(t, "gateway", "effectfence wrap: listening on ", nil, binary(t), "wrap", "--listen", "127.0.0.1:0",
		"--ledger", filepath.Join(t.TempDir(), "ledger.db"), "--grace", "500ms",
		"--fence", "echo", "--fence", "get-structured-content", "--", everything)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "gateway_client.mjs"))
	node.Env = append(os.Environ(), "PEERS="+peers, "DIRECT_URL="+direct.url, "GATEWAY_URL="+gateway.url)
	var stderr logBuf
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var rep struct{ Direct, Gateway sdkRun }
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %s: %v", out, err)
	}
	d, g := rep.Direct, rep.Gateway
	if d.Error != "" || g.Error != "" {
		t.Fatalf("a run failed: direct %q, gateway %q", d.Error, g.Error)
	}
	t.Run("tools", func(t *testing.T) {
		if !strings.HasPrefix(d.ToolsList, `{"tools":[`) || g.ToolsList != d.ToolsList {
			t.Fatalf("tools/list through the gateway differs from the server's:\n direct %.300s\ngateway %.300s", d.ToolsList, g.ToolsList)
		}
	})
	t.Run("fenced replays", func(t *testing.T) {
		// Direct, the four identical echoes all run; through the gateway one runs and three
		// are answered from the ledger, with the same text.
		for _, e := range d.Echo {
			if e.Error != "" || e.Replayed || e.Text != "Echo: once over http" {
				t.Fatalf("direct echo: %+v", d.Echo)
			}
		}
		replays := 0
		for _, e := range g.Echo {
			if e.Error != "" || e.IsError || e.Text != "Echo: once over http" {
				t.Fatalf("gateway echo: %+v", g.Echo)
			}
			if e.Replayed {
				replays++
			}
		}
		if len(g.Echo) != 4 || replays != 3 {
			t.Fatalf("want 3 of 4 identical echoes answered from the ledger: %+v", g.Echo)
		}
		// The SDK validates structuredContent against the tool's outputSchema; a replay passes
		// that validation and holds what the server answered.
		s := g.Structured
		if len(s) != 2 || s[0].Error != "" || s[1].Error != "" || s[0].Replayed || !s[1].Replayed ||
			!sameJSON(s[1].Structured, s[0].Structured) || len(s[0].Structured) < 3 {
			t.Fatalf("structured content through the SDK's output validation: %+v", s)
		}
		if len(d.Structured) != 2 || d.Structured[0].Error != "" || d.Structured[0].Text == "" {
			t.Fatalf("direct get-structured-content: %+v", d.Structured)
		}
	})
	t.Run("resources", func(t *testing.T) {
		dr, gr := d.Resources, g.Resources
		if dr.Error != "" || gr.Error != "" || dr.List == "" || gr.List != dr.List || gr.Templates != dr.Templates || gr.Read != dr.Read {
			t.Fatalf("resources differ:\n direct %+v\ngateway %+v", dr, gr)
		}
		// Subscribing works, and the update the server then sends reaches the client.
		if !d.SubscribeLogged || d.Updated != dr.URI || d.ToggleUpdates.Error != "" {
			t.Fatalf("direct subscription: logged %v, updated %q, toggle %+v", d.SubscribeLogged, d.Updated, d.ToggleUpdates)
		}
		if !g.SubscribeLogged || g.Updated != gr.URI || g.ToggleUpdates.Error != "" || g.ToggleUpdates.IsError || g.Unsubscribe != "ok" {
			t.Fatalf("gateway subscription: logged %v, updated %q, toggle %+v, unsubscribe %q", g.SubscribeLogged, g.Updated, g.ToggleUpdates, g.Unsubscribe)
		}
	})
	t.Run("prompts", func(t *testing.T) {
		if d.Prompts.Error != "" || d.Prompts.List == "" || g.Prompts != d.Prompts {
			t.Fatalf("prompts differ:\n direct %+v\ngateway %+v", d.Prompts, g.Prompts)
		}
	})
	t.Run("logging", func(t *testing.T) {
		if d.SetLevel != "ok" || g.SetLevel != "ok" {
			t.Fatalf("logging/setLevel: direct %q, gateway %q", d.SetLevel, g.SetLevel)
		}
		// The same log notifications arrive (the roots sync, subscribe and unsubscribe).
		// The roots sync may be logged once more through the gateway (see roots): compare the
		// distinct messages.
		dl, gl := slices.Compact(slices.Sorted(slices.Values(d.Logs))), slices.Compact(slices.Sorted(slices.Values(g.Logs)))
		if len(dl) < 3 || !slices.Equal(dl, gl) {
			t.Fatalf("log notifications differ:\n direct %q\ngateway %q", dl, gl)
		}
	})
	t.Run("progress", func(t *testing.T) {
		for _, r := range []sdkRun{d, g} {
			if r.LongRun.Error != "" || r.LongRun.IsError || r.Progress != 2 {
				t.Fatalf("long-running call with 2 steps: %+v, %d progress notifications", r.LongRun, r.Progress)
			}
		}
	})
	t.Run("sampling", func(t *testing.T) {
		if d.Sampling.Error != "" || !strings.Contains(d.Sampling.Text, "sampled answer to:") || g.Sampling != d.Sampling {
			t.Fatalf("sampling differs:\n direct %+v\ngateway %+v", d.Sampling, g.Sampling)
		}
	})
	t.Run("elicitation", func(t *testing.T) {
		if d.Elicited != 1 || g.Elicited != 1 || !strings.Contains(d.Elicitation.Text, "Ada Lovelace") || g.Elicitation != d.Elicitation {
			t.Fatalf("elicitation differs:\n direct %d %+v\ngateway %d %+v", d.Elicited, d.Elicitation, g.Elicited, g.Elicitation)
		}
	})
	t.Run("roots", func(t *testing.T) {
		// The server asks for the roots on its own after initialization (on the GET stream
		// directly; on the open stream the gateway has), and get-roots-list shows them.
		if d.RootsAskedAtStart != 1 || g.RootsAskedAtStart != 1 || !strings.Contains(d.Roots.Text, "file:///tmp/effectfence-gateway-e2e") || g.Roots != d.Roots {
			t.Fatalf("roots differ:\n direct asked %d %+v\ngateway asked %d %+v", d.RootsAskedAtStart, d.Roots, g.RootsAskedAtStart, g.Roots)
		}
		// notifications/roots/list_changed: the server asks again (through the gateway on the
		// GET stream, as no request is open) and lists both roots.
		// (server-everything over stdio may ask once more on its own: at least twice.)
		if d.RootsAsked < 2 || g.RootsAsked < 2 || !strings.Contains(d.RootsChanged.Text, "file:///tmp/effectfence-gateway-e2e-2") || g.RootsChanged != d.RootsChanged {
			t.Fatalf("changed roots differ:\n direct asked %d %+v\ngateway asked %d %+v", d.RootsAsked, d.RootsChanged, g.RootsAsked, g.RootsChanged)
		}
	})
	t.Run("cancellation", func(t *testing.T) {
		for name, c := range map[string]sdkCancel{"direct": d.Cancel, "gateway": g.Cancel} {
			if c.Error != "" || !c.Aborted || c.ProgressBeforeAbort < 1 || !strings.Contains(c.Outcome, "the e2e client gave up") ||
				c.Ping != "ok" || c.After.Error != "" || c.After.Text != "Echo: after the cancellation" {
				t.Fatalf("%s: the aborted call must reject with the client's reason and the session go on: %+v", name, c)
			}
		}
	})
	t.Run("tasks", func(t *testing.T) {
		const report = "# Research Report: fencing tokens"
		for name, k := range map[string]sdkTasks{"direct": d.Tasks, "gateway": g.Tasks} {
			if k.Error != "" || k.TaskID == "" || k.Final.Error != "" || !strings.HasPrefix(k.Final.Text, report) ||
				len(k.Statuses) == 0 || k.Statuses[len(k.Statuses)-1] != "completed" {
				t.Fatalf("%s: the SDK did not follow the task to its final result: %+v", name, k)
			}
		}
		if g.Tasks.Final.Text != d.Tasks.Final.Text {
			t.Fatalf("final results differ:\n direct %q\ngateway %q", d.Tasks.Final.Text, g.Tasks.Final.Text)
		}
		// Not comparable: the server refuses a plain call of a task-required tool, while the
		// gateway makes it a duplicate of the running task, which waits for its final result.
		t.Logf("the same task-augmented call once the task is done: direct %q, gateway %q", d.Tasks.Again, g.Tasks.Again)
		if again := strings.Join(g.Tasks.Again, " | "); !strings.Contains(again, "taskCreated") || !strings.Contains(again, "result: "+report) || strings.Contains(again, "error") {
			t.Fatalf("the later task-augmented duplicate through the gateway: want a task followed to the recorded result, got %q", again)
		}
		if dup := g.Tasks.Duplicate; dup == nil || dup.Error != "" || !dup.Replayed || dup.Text != g.Tasks.Final.Text {
			t.Fatalf("a duplicate of the running task through the gateway: %+v", dup)
		}
	})
	t.Run("broken stream", func(t *testing.T) {
		// Direct, nothing remembers the first call: the re-sent call runs again. Through the
		// gateway the first call's outcome is recorded although its stream was gone, and the
		// re-sent call (a new JSON-RPC id) receives it: the server asked for sampling once.
		t.Logf("direct: the re-sent call ran the tool %d times in all", d.Broken.Executions)
		b := g.Broken
		if b.Error != "" || b.Resent.Error != "" || b.Resent.IsError || !b.Resent.Replayed ||
			!strings.Contains(b.Resent.Text, "sampled answer to: Resource trigger-sampling-request context: broken-stream") {
			t.Fatalf("the re-sent call after a broken stream: %+v", b)
		}
		if b.Executions != 1 {
			t.Fatalf("the broken-stream call ran %d times through the gateway, want 1", b.Executions)
		}
	})
	if strings.Contains(gateway.log.String(), "DATA RACE") {
		t.Fatalf("gateway log:\n%s", gateway.log.String())
	}
}

// sameJSON reports whether two JSON texts hold the same value (member order aside).
func sameJSON(a, b []byte) bool {
	ca, err1 := canon.JSON(a)
	cb, err2 := canon.JSON(b)
	return err1 == nil && err2 == nil && string(ca) == string(cb)
}

// sdkCall is one tool call as gateway_client.mjs reports it.
type sdkCall struct {
	IsError    bool            `json:"isError"`
	Text       string          `json:"text"`
	Structured json.RawMessage `json:"structured"`
	Replayed   bool            `json:"replayed"`
	Error      string          `json:"error"`
}

// sdkCallCmp is sdkCall without the raw JSON, so == compares answers.
type sdkCallCmp struct {
	IsError  bool   `json:"isError"`
	Text     string `json:"text"`
	Replayed bool   `json:"replayed"`
	Error    string `json:"error"`
}

type sdkCancel struct {
	ProgressBeforeAbort int    `json:"progressBeforeAbort"`
	Outcome             string `json:"outcome"`
	Aborted             bool   `json:"aborted"`
	Ping                string `json:"ping"`
	After               sdkCallCmp
	Error               string `json:"error"`
}

type sdkTasks struct {
	TaskID    string      `json:"taskId"`
	Statuses  []string    `json:"statuses"`
	Final     sdkCallCmp  `json:"final"`
	Duplicate *sdkCallCmp `json:"duplicate"`
	Again     []string    `json:"again"`
	Error     string      `json:"error"`
}

// sdkRun is the report of one run of gateway_client.mjs against one URL.
type sdkRun struct {
	Error             string `json:"error"`
	ToolsList         string `json:"toolsList"`
	RootsAskedAtStart int    `json:"rootsAskedAtStart"`
	Roots             sdkCallCmp
	RootsChanged      sdkCallCmp
	RootsAsked        int    `json:"rootsAsked"`
	SetLevel          string `json:"setLevel"`
	Resources         struct {
		List, Templates, URI, Read, Error string
	}
	SubscribeLogged bool `json:"subscribeLogged"`
	ToggleUpdates   sdkCallCmp
	Updated         string `json:"updated"`
	Unsubscribe     string `json:"unsubscribe"`
	Prompts         struct{ List, Get, Error string }
	Echo            []sdkCall
	Structured      []sdkCall
	LongRun         sdkCallCmp
	Progress        int `json:"progress"`
	Sampling        sdkCallCmp
	Elicitation     sdkCallCmp
	Elicited        int `json:"elicited"`
	Cancel          sdkCancel
	Tasks           sdkTasks
	Broken          struct {
		Resent     sdkCallCmp
		Executions int    `json:"executions"`
		Error      string `json:"error"`
	}
	Logs []string `json:"logs"`
}

// proc is a server process of a test, listening on url.
type proc struct {
	url string
	log *logBuf
	cmd *exec.Cmd
	// exited is closed once the process has exited.
	exited chan struct{}
}

// startProcess starts argv with env added, waits for the stderr line that starts with
// prefix (the rest of the line is its URL), and stops it (SIGTERM, then SIGKILL) when the
// test ends. It returns nil when the process exits before printing the line.
func startProcess(t *testing.T, name, prefix string, env []string, argv ...string) *proc {
	t.Helper()
	p, err := tryStartProcess(t, name, prefix, env, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func tryStartProcess(t *testing.T, name, prefix string, env []string, argv ...string) (*proc, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	cmd.Stdout = io.Discard // server-everything's HTTP mode logs every request on stdout
	p := &proc{log: &logBuf{}, cmd: cmd}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	pw.Close()
	found := make(chan string, 1)
	go func() {
		defer close(found)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.log, line)
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				found <- rest
			}
		}
	}()
	exited := make(chan struct{})
	p.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.log.String())
		}
	})
	select {
	case u, ok := <-found:
		if !ok {
			<-exited
			return nil, fmt.Errorf("%s exited before it listened:\n%s", name, p.log.String())
		}
		p.url = u
		return p, nil
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("%s did not start listening:\n%s", name, p.log.String())
	}
}

// startEverythingHTTP runs server-everything in its own Streamable HTTP mode. It takes its
// port from PORT and cannot pick one itself, so a free port is chosen here; one taken in the
// meantime is retried with another.
func startEverythingHTTP(t *testing.T, everything string) *proc {
	t.Helper()
	var last error
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		p, err := tryStartProcess(t, "server-everything (streamableHttp)", "MCP Streamable HTTP Server listening on port ",
			[]string{"PORT=" + strconv.Itoa(port)}, everything, "streamableHttp")
		if err == nil {
			p.url = fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
			return p
		}
		last = err
	}
	t.Fatal(last)
	return nil
}
