package wrap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
	"github.com/effectfence/effectfence/pkg/store"
)

// The tests run real processes: the effectfence binary (built once, with -race under -race) as the wrap
// process, and mcptest's server behind it: by default the program mcptestserver, built
// without the race detector (the server is not what these tests are about; re-executed in
// its place, this race-built test binary spent about 39 CPU-seconds of the package's 208), or
// this test binary re-executed where a test needs its path (testExe).
var (
	efBin     string
	testExe   string
	serverBin string
)

func TestMain(m *testing.M) {
	mcptest.MaybeServe()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "wrap-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if efBin, err = cmdtest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if serverBin, err = cmdtest.BuildServer(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if testExe, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// logBuf is a goroutine-safe buffer for a process's stderr.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// rig is one test's world: an effects file, a state directory (where the default ledger
// lives) and the mode of the test server.
type rig struct {
	t       *testing.T
	dir     string
	effects string
	mode    string
	ledger  string // EFFECTFENCE_LEDGER for the wrap processes ("" = default file)
	// childCmdOverride replaces the test server with another MCP server command.
	childCmdOverride []string
	// workDir is the wrap process's working directory ("" for the test's).
	workDir string
	// prefix runs the wrap process under a command (unshare ... --), when set.
	prefix []string
	// bin replaces the effectfence binary (a copy another user can run), when set.
	bin string
	// extraEnv is added to the wrap process's environment (and so the child's).
	extraEnv []string
	// init replaces the agent's initialize params.
	init json.RawMessage
	// onRequest answers requests the server sends to the agent.
	onRequest func(context.Context, string, json.RawMessage) (json.RawMessage, error)
}

func newRig(t *testing.T) *rig {
	dir := t.TempDir()
	return &rig{t: t, dir: dir, effects: filepath.Join(dir, "effects"), ledger: filepath.Join(dir, "ledger.db")}
}

func (r *rig) env() []string {
	env := append(mcptest.Env(r.effects, r.mode), "EFFECTFENCE_LEDGER="+r.ledger, "XDG_STATE_HOME="+filepath.Join(r.dir, "state"),
		"MEMORY_FILE_PATH="+filepath.Join(r.dir, "memory.jsonl"))
	return append(env, r.extraEnv...)
}

// childCmd is the MCP server command line behind wrap.
func (r *rig) childCmd() []string {
	if r.childCmdOverride != nil {
		return r.childCmdOverride
	}
	return []string{serverBin}
}

// wrapProc is one running `effectfence wrap` as seen by an agent.
type wrapProc struct {
	*mcpstdio.Session
	log   *logBuf
	notes chan string
}

// wrap starts `effectfence wrap FLAGS -- child` and connects to it as an agent.
func (r *rig) wrap(flags ...string) *wrapProc {
	r.t.Helper()
	w, err := r.tryWrap(flags...)
	if err != nil {
		r.t.Fatal(err)
	}
	return w
}

func (r *rig) tryWrap(flags ...string) (*wrapProc, error) {
	bin := efBin
	if r.bin != "" {
		bin = r.bin
	}
	argv := append(append(slices.Clone(r.prefix), bin, "wrap"), flags...)
	argv = append(append(argv, "--"), r.childCmd()...)
	w := &wrapProc{log: &logBuf{}, notes: make(chan string, 16)}
	init := r.init
	if init == nil {
		init = json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	}
	s, err := mcpstdio.Start(context.Background(), mcpstdio.Config{
		Command: argv, Env: r.env(), Dir: r.workDir, Stderr: w.log, InitTimeout: 60 * time.Second,
		Init:           init,
		OnNotification: func(method string, _ json.RawMessage) { w.notes <- method },
		OnRequest:      r.onRequest,
	})
	if err != nil {
		return nil, fmt.Errorf("%v; wrap stderr: %s", err, w.log.String())
	}
	w.Session = s
	r.t.Cleanup(func() {
		s.Close()
		if strings.Contains(w.log.String(), "DATA RACE") {
			r.t.Errorf("race in the wrap process:\n%s", w.log.String())
		}
	})
	return w, nil
}

// direct connects to the test server without wrap.
func (r *rig) direct() *mcpstdio.Session {
	r.t.Helper()
	s, err := mcpstdio.Start(context.Background(), mcpstdio.Config{
		Command: r.childCmd(), Env: r.env(), Stderr: &logBuf{},
		Init: json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"test-agent","version":"1"}}`),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { s.Close() })
	return s
}

func (r *rig) effectCount() int { return len(mcptest.Effects(r.effects)) }

// result is a decoded tool result.
type result struct {
	Content           json.RawMessage            `json:"content"`
	StructuredContent json.RawMessage            `json:"structuredContent"`
	IsError           bool                       `json:"isError"`
	Meta              map[string]json.RawMessage `json:"_meta"`
}

func (x result) text() string {
	var c []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(x.Content, &c)
	var parts []string
	for _, p := range c {
		if !strings.HasPrefix(p.Text, "effectfence: this is the recorded result") {
			parts = append(parts, p.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// same is the result without _meta and without wrap's replay note, canonical, for comparing
// answers.
func (x result) same() string {
	var items []json.RawMessage
	_ = json.Unmarshal(x.Content, &items)
	kept := []json.RawMessage{}
	for _, it := range items {
		if !strings.Contains(string(it), `"effectfence/note":true`) {
			kept = append(kept, it)
		}
	}
	b, _ := json.Marshal(map[string]any{"content": kept, "structuredContent": x.StructuredContent, "isError": x.IsError})
	c, err := canon.JSON(b)
	if err != nil {
		return "invalid: " + err.Error()
	}
	return string(c)
}

func (x result) replayed() bool { return string(x.Meta["effectfence/replayed"]) == "true" }

// intent is the intent wrap named in the result's _meta ("" when it named none).
func (x result) intent() string {
	var s string
	_ = json.Unmarshal(x.Meta["effectfence/intent"], &s)
	return s
}

// note is the text wrap added to a replay, if any.
func (x result) note() string {
	var c []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(x.Content, &c)
	for _, p := range c {
		if strings.HasPrefix(p.Text, "effectfence: this is the recorded result") {
			return p.Text
		}
	}
	return ""
}

func call(t *testing.T, s *mcpstdio.Session, tool, args string) result {
	t.Helper()
	x, err := callE(s, tool, args)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func callE(s *mcpstdio.Session, tool, args string) (result, error) {
	var x result
	raw, err := s.CallTool(context.Background(), tool, json.RawMessage(args))
	if err != nil {
		return x, fmt.Errorf("%s %s: %w", tool, args, err)
	}
	if err := json.Unmarshal(raw, &x); err != nil {
		return x, fmt.Errorf("%s: result %s: %w", tool, raw, err)
	}
	return x, nil
}

// storm fires n identical calls at once from as many goroutines.
func storm(t *testing.T, s *mcpstdio.Session, n int, tool, args string) []result {
	t.Helper()
	out := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var err error
			if out[i], err = callE(s, tool, args); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// openLedger opens the rig's ledger file from the test process, as an operator would.
func (r *rig) openLedger() *store.Ledger {
	r.t.Helper()
	l, err := store.Open(context.Background(), store.Options{Ledger: r.ledger})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { l.Close() })
	return l
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
