package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
)

func TestRestartReplaysWhatRan(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	first := call(t, w.Session, "charge", `{"amount":100,"order":"restart"}`)
	w.Close()
	w2 := r.wrap()
	again := call(t, w2.Session, "charge", `{"amount":100,"order":"restart"}`)
	if !again.replayed() || again.same() != first.same() || r.effectCount() != 1 {
		t.Fatalf("after a restart the call must replay the recorded result: %+v vs %+v, %d effects", again, first, r.effectCount())
	}
}

func TestDefaultLedgerIsPerChildCommand(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.ledger = "" // the default file under XDG_STATE_HOME, named after the child command
	w := r.wrap()
	call(t, w.Session, "charge", `{"amount":1}`)
	w.Close()
	want := filepath.Join(r.dir, "state", "effectfence", store.CurrentWrapScope(r.childCmd(), "", r.env()...).LedgerName()+".db")
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("default ledger not at %s: %v", want, err)
	}
	w2 := r.wrap()
	if x := call(t, w2.Session, "charge", `{"amount":1}`); !x.replayed() {
		t.Fatalf("restart on the default ledger did not replay: %+v", x)
	}
	w2.Close()
	// The operator's view of the same ledger.
	cmd := exec.Command(efBin, append([]string{"ledger", "stats", "--for", "--"}, r.childCmd()...)...)
	cmd.Env = append(os.Environ(), r.env()...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "admitted=1 replayed=1 ") {
		t.Fatalf("ledger stats --for: %v\n%s", err, out)
	}
	// Another account in the environment is another scope: its own default file, and the
	// call runs there.
	r.extraEnv = []string{"ACCOUNT=B"}
	w3 := r.wrap()
	if x := call(t, w3.Session, "charge", `{"amount":1}`); x.replayed() || x.IsError {
		t.Fatalf("another account received the first account's receipt: %+v", x)
	}
	w3.Close()
	other := filepath.Join(r.dir, "state", "effectfence", store.CurrentWrapScope(r.childCmd(), "", r.env()...).LedgerName()+".db")
	if other == want {
		t.Fatal("two scopes share one default file")
	}
	if _, err := os.Stat(other); err != nil || r.effectCount() != 2 {
		t.Fatalf("second scope: file %v, %d effects", err, r.effectCount())
	}
}

func TestThreeWrapProcessesOneLedgerOneExecution(t *testing.T) {
	t.Parallel()
	threeProcesses(t, newRig(t), "three")
}

func TestThreeWrapProcessesOnePostgresLedger(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// A schema of its own (dropped at the end): nothing lands in the server's public schema.
	r.ledger = pgtest.Ledger(t, "wrap")
	threeProcesses(t, r, "pg")
	if own, public := pgtest.Where(t, r.ledger); len(own) != 1 || len(public) != 0 {
		t.Fatalf("the ledger's intents: %v in the test's own schema, %v in public; want 1 and none", own, public)
	}
}

// threeProcesses fires the same call from three wrap processes on r's ledger, four callers
// each, and checks the child ran it once.
func threeProcesses(t *testing.T, r *rig, tag string) {
	procs := []*wrapProc{r.wrap(), r.wrap(), r.wrap()}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all []result
	)
	start := make(chan struct{})
	for _, w := range procs {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				x, err := callE(w.Session, "slow", `{"ms":300,"tag":"`+tag+`"}`)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				all = append(all, x)
				mu.Unlock()
			}()
		}
	}
	close(start)
	wg.Wait()
	if n := r.effectCount(); n != 1 {
		t.Fatalf("three wrap processes on one ledger executed %d times, want 1", n)
	}
	for _, x := range all {
		if x.IsError || x.same() != all[0].same() {
			t.Fatalf("answers differ: %+v", all)
		}
	}
}

// runClearCommand runs the `effectfence ledger clear ...` command quoted in a fenced call's
// message, through a shell, as an operator would paste it.
func (r *rig) runClearCommand(msg string) {
	r.t.Helper()
	i := strings.Index(msg, "effectfence ledger clear ")
	if i < 0 {
		r.t.Fatalf("no clear command in %q", msg)
	}
	line := strings.TrimSpace(msg[i:])
	cmd := exec.Command("sh", "-c", efBin+strings.TrimPrefix(line, "effectfence"))
	cmd.Env = append(os.Environ(), r.env()...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cleared") {
		r.t.Fatalf("%s: %v\n%s", line, err, out)
	}
}

func TestChildDeathMidCallIsUnknownAndChildRestarts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.ledger = "" // the default ledger, which the operator names with --for -- <command>
	w := r.wrap()
	out := storm(t, w.Session, 3, "die", `{"ms":200}`)
	for _, x := range out {
		if !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` || !strings.Contains(x.text(), "ledger clear") {
			t.Fatalf("every caller must be told the outcome is unknown and how to clear it: %+v", x.text())
		}
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("die ran %d times, want 1", n)
	}
	again := call(t, w.Session, "die", `{"ms":200}`)
	if !again.IsError || !strings.Contains(again.text(), "NOT executed again") || r.effectCount() != 1 {
		t.Fatalf("a retry must be fenced: %+v", again.text())
	}
	// The child is restarted for the next call.
	if x := call(t, w.Session, "charge", `{"amount":2}`); x.IsError || r.effectCount() != 2 {
		t.Fatalf("the dead child was not restarted: %+v", x)
	}
	// After the operator's clear (on the default per-command ledger: --for -- <command>),
	// the call runs again.
	r.runClearCommand(again.text())
	if x := call(t, w.Session, "die", `{"ms":200}`); !x.IsError || r.effectCount() != 3 {
		t.Fatalf("after clear the call must run: %+v, %d effects", x.text(), r.effectCount())
	}
}

func TestBadInputFromTheAgent(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.rawWrap()
	// Each answer must contain want (and also, when set).
	cases := []struct{ in, want, also string }{
		{`this is not json`, `"code":-32700`, ""},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, `batches are not supported`, ""},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, `has not sent initialize`, ""},
		{`{"jsonrpc":"2.0","id":3,"method":"ping"}`, `{"jsonrpc":"2.0","id":3,"result":{}}`, ""},
		{initLine, `"serverInfo":{"name":"mcptest"`, ""},
		{initLine, `already sent`, ""},
		// Malformed tools/call params are refused by wrap's strict decoding before the child
		// sees them: -32602, not executed (the count at the end proves it).
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge","arguments":"x"}}`, `{"code":-32602,"message":"effectfence wrap: tools/call params refused (\"arguments\" must be an object); the call was NOT executed"}`, ""},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"arguments":{}}}`, `{"code":-32602,"message":"effectfence wrap: tools/call params refused (\"name\" is missing); the call was NOT executed"}`, ""},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1]}`, `{"code":-32602,"message":"effectfence wrap: tools/call params refused (tools/call params must be an object); the call was NOT executed"}`, ""},
		// A number beyond double range is fenced by its exact value; the child refuses it.
		{`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1e999}}}`, `cannot unmarshal number 1e999`, ""},
		{`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charge","arguments":{"amount":"lots"}}}`, `cannot unmarshal string`, ""},
		// The child refused it: released, not fenced, so the same call reaches the child again.
		{`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charge","arguments":{"amount":"lots"}}}`, `cannot unmarshal string`, ""},
		{`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"charge","arguments":{"amount":0}}}`, `"isError":true`, ""},
		{`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`, `charged 5`, ""},
	}
	for _, c := range cases {
		if got := rw.roundTrip(t, c.in); !strings.Contains(got, c.want) || !strings.Contains(got, c.also) {
			t.Fatalf("%s\n got %s\nwant it to contain %s %s", c.in, got, c.want, c.also)
		}
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("want 1 execution, got %d", n)
	}
}

func TestChildThatExitsAtStartOrNeverAnswers(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exit", "mute"} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			r.mode = mode
			// A child that exits must be reported as exited however slowly it starts (a loaded
			// machine can take seconds to start a test binary), so only the mute child gets
			// the short timeout.
			timeout := map[string]string{"exit": "60s", "mute": "500ms"}[mode]
			rw := r.rawWrap("--init-timeout", timeout)
			want := map[string]string{"exit": "exit status 3", "mute": "did not answer initialize within 500ms"}[mode]
			if got := rw.roundTrip(t, initLine); !strings.Contains(got, `"error"`) || !strings.Contains(got, want) {
				t.Fatalf("initialize: %s", got)
			}
			// wrap stays up and answers.
			if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); got != `{"jsonrpc":"2.0","id":3,"result":{}}` {
				t.Fatalf("ping after a failed child: %s", got)
			}
			led := r.openLedger()
			st, err := led.Stats(context.Background())
			if err != nil || st.Ledger.Total() != 0 {
				t.Fatalf("nothing may be fenced: %+v %v", st, err)
			}
		})
	}
}

func TestRealMemoryServer(t *testing.T) {
	t.Parallel()
	bin, _ := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-memory")
	if _, err := os.Stat(bin); err != nil {
		t.Skip("skipping: @modelcontextprotocol/server-memory is not installed; run scripts/install-peers")
	}
	r := newRig(t)
	r.childCmdOverride = []string{bin}
	d := r.direct()
	w := r.wrap()
	a, err1 := d.ListTools(context.Background(), "")
	b, err2 := w.ListTools(context.Background(), "")
	if err1 != nil || err2 != nil || string(a) != string(b) {
		t.Fatalf("tools/list not byte-identical through wrap:\n%s\n%s", a, b)
	}
	args := `{"entities":[{"name":"order-123","entityType":"order","observations":["charged 49.00"]}]}`
	out := storm(t, w.Session, 12, "create_entities", args)
	replays := 0
	for _, x := range out {
		if x.IsError || x.same() != out[0].same() {
			t.Fatalf("answers differ: %+v", out)
		}
		if x.replayed() {
			replays++
		}
	}
	if replays != 11 {
		t.Fatalf("want 11 replays, got %d", replays)
	}
	// server-memory skips an observation it already has, so unfenced duplicates would answer
	// "added nothing"; behind the fence every duplicate gets the one real answer.
	obs := `{"observations":[{"entityName":"order-123","contents":["refunded"]}]}`
	for _, x := range storm(t, w.Session, 6, "add_observations", obs) {
		if x.IsError || !strings.Contains(x.text(), "refunded") {
			t.Fatalf("a duplicate did not receive the recorded answer: %s", x.text())
		}
	}
	graph, err := d.CallTool(context.Background(), "read_graph", json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(graph), "refunded") {
		t.Fatalf("read_graph: %s %v", graph, err)
	}
}

func TestAgentHangingUpOrSIGTERMDoesNotAbortTheCall(t *testing.T) {
	t.Parallel()
	// SIGHUP: the agent's terminal closed (its session's foreground group is told so).
	for _, how := range []string{"hang-up", "SIGTERM", "SIGHUP"} {
		t.Run(how, func(t *testing.T) {
			if how != "hang-up" && runtime.GOOS == "windows" {
				t.Skip("Windows has no such signal to send: os.Process.Signal can only kill there")
			}
			if how == "SIGHUP" && signal.Ignored(syscall.SIGHUP) {
				// This test runs under nohup (or alike), and a child inherits an ignored
				// signal, which wrap keeps ignoring (TestNohupStillIgnoresSIGHUP). Handled
				// here, SIGHUP is back to its default in a child started now.
				ch := make(chan os.Signal, 1)
				signal.Notify(ch, syscall.SIGHUP)
				defer signal.Stop(ch)
			}
			r := newRig(t)
			rw := r.rawWrap()
			if got := rw.roundTrip(t, initLine); !strings.Contains(got, `"result"`) {
				t.Fatalf("initialize: %s", got)
			}
			const slowCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":800,"tag":"stop"}}}`
			if _, err := io.WriteString(rw.in, slowCall+"\n"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // the call is in the child
			if sig, ok := map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGHUP": syscall.SIGHUP}[how]; ok {
				if err := rw.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
			} else {
				rw.in.Close() // the agent hangs up, both ways
				rw.stdout.Close()
			}
			exited := make(chan error, 1)
			go func() { exited <- rw.cmd.Wait() }()
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("wrap exit: %v; stderr: %s", err, rw.log.String())
				}
			case <-time.After(60 * time.Second):
				_ = rw.cmd.Process.Kill()
				t.Fatalf("wrap did not stop within a minute of %s; stderr: %s", how, rw.log.String())
			}
			if r.effectCount() != 1 || !strings.Contains(rw.log.String(), "effectfence since boot: admitted=1 ") {
				t.Fatalf("the call was aborted: %d effects; stderr: %s", r.effectCount(), rw.log.String())
			}
			w := r.wrap()
			if x := call(t, w.Session, "slow", `{"ms":800,"tag":"stop"}`); !x.replayed() || r.effectCount() != 1 {
				t.Fatalf("the outcome of the call was not recorded: %+v", x)
			}
		})
	}
}

func TestCancellationReachesPassThroughRequestsOnly(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap("--pass", "slow")
	send := func(line string) { t.Helper(); rw.send(t, line) }
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1000,"tag":"pass"}}}`)
	send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"charge","arguments":{"amount":3}}}`)
	// Both reached the child (a fenced call not sent yet would not be detached: it would
	// just not be sent, and not answered).
	waitFor(t, "both calls to reach the child", func() bool {
		charged := false
		for _, e := range mcptest.Effects(r.effects) {
			charged = charged || strings.HasPrefix(e, "charge amount=3")
		}
		return charged && strings.Contains(rw.log.String(), "mcptest: slow tag=pass started")
	})
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"agent gave up"}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":6,"reason":"agent gave up"}}`)
	// The fenced charge still answers; the cancelled pass-through call never does.
	if got, _ := rw.out.ReadString('\n'); !strings.Contains(got, `"id":6`) || !strings.Contains(got, "charged 3") {
		t.Fatalf("want the fenced call's answer, got %s", got)
	}
	time.Sleep(1200 * time.Millisecond) // the child finishes the cancelled call (it ignores cancellation)
	if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":7,"method":"ping"}`); got != `{"jsonrpc":"2.0","id":7,"result":{}}` {
		t.Fatalf("a cancelled request was answered: %s", got)
	}
	if l := rw.log.String(); strings.Count(l, "mcptest: cancelled") != 1 || !regexp.MustCompile(`mcptest: cancelled .*"requestId":\d+`).MatchString(l) {
		t.Fatalf("the child must be told of the pass-through cancellation only:\n%s", l)
	}
}

func TestRealSDKClientThroughWrap(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	for _, p := range []string{"node_modules/@modelcontextprotocol/sdk/package.json", "node_modules/.bin/mcp-server-everything"} {
		if _, err := os.Stat(filepath.Join(peers, p)); err != nil {
			t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "wrap_client.mjs"))
	node.Env = append(os.Environ(), "PEERS="+peers, "EF_BIN="+efBin, "EF_LEDGER="+filepath.Join(t.TempDir(), "ledger.db"), "GORACE=atexit_sleep_ms=0")
	var stderr logBuf
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	type res struct {
		IsError    bool            `json:"isError"`
		Text       string          `json:"text"`
		Structured json.RawMessage `json:"structured"`
		Replayed   bool            `json:"replayed"`
		Error      string          `json:"error"`
	}
	var rep struct {
		ToolsEqual, Resources, Prompts bool
		Echo, Structured               []res
		LongRun                        res
		Progress                       int
		ProgressOnWire                 int `json:"progressOnWire"`
		ProgressBeforeResult           int `json:"progressBeforeResult"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %s: %v", out, err)
	}
	if !rep.ToolsEqual || !rep.Resources || !rep.Prompts {
		t.Fatalf("listings differ through wrap: %s", out)
	}
	replays := 0
	for _, e := range rep.Echo {
		if e.Error != "" || e.IsError || e.Text != rep.Echo[0].Text {
			t.Fatalf("echo answers: %s", out)
		}
		if e.Replayed {
			replays++
		}
	}
	if replays != 3 {
		t.Fatalf("want 3 of 4 identical echoes answered from the ledger: %s", out)
	}
	s := rep.Structured
	if len(s) != 2 || s[0].Error != "" || s[1].Error != "" || s[0].Replayed || !s[1].Replayed || !sameJSON(s[0].Structured, s[1].Structured) || len(s[0].Structured) < 3 {
		t.Fatalf("structured content through the SDK's output validation: %s", out)
	}
	// The server writes its last progress notification right before the result; wrap keeps
	// the order. Judged on the wire: the SDK client drops a progress notification that comes
	// in one read with the result (it handles the notification a microtask later, after the
	// result has retired the call), which a loaded machine made happen once in a while.
	if rep.LongRun.Error != "" || rep.LongRun.IsError || rep.ProgressOnWire != 2 || rep.ProgressBeforeResult != 2 || rep.Progress < 1 {
		t.Fatalf("every progress notification of a fenced call must reach the caller before its result: %s", out)
	}
}

// sameJSON reports whether two JSON texts hold the same value (member order aside).
func sameJSON(a, b []byte) bool {
	ca, err1 := canon.JSON(a)
	cb, err2 := canon.JSON(b)
	return err1 == nil && err2 == nil && string(ca) == string(cb)
}

func TestWaitingDuplicatesTakeNoSlot(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.rawWrap("--max-concurrent", "1")
	if got := rw.roundTrip(t, initLine); !strings.Contains(got, `"result"`) {
		t.Fatalf("initialize: %s", got)
	}
	send := func(line string) {
		if _, err := io.WriteString(rw.in, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":800,"tag":"slot"}}}`)
	// The slow call holds the one slot once it is inside the server (on a loaded machine its
	// admission can take longer than any fixed sleep).
	waitFor(t, "the slow call to start", func() bool { return strings.Contains(rw.log.String(), "slow tag=slot started") })
	for id := 2; id <= 6; id++ { // duplicates: they wait, holding no slot
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","arguments":{"ms":800,"tag":"slot"}}}`, id))
	}
	time.Sleep(100 * time.Millisecond)
	send(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge","arguments":{"amount":8}}}`)
	var order []string
	for range 8 {
		line, err := rw.out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		order = append(order, string(m.ID))
	}
	// The ping does not queue behind the slow call or its duplicates.
	if order[0] != "7" {
		t.Fatalf("answer order %v", order)
	}
	// The distinct charge does wait for the one slot: the server runs it after the slow call
	// ended (it records its effect at its end). Its answer may still come first: the slot is
	// free once the server has answered, before wrap has recorded the slow call's outcome.
	effects := mcptest.Effects(r.effects)
	if len(effects) != 2 || !strings.HasPrefix(effects[0], "slow tag=slot") || !strings.HasPrefix(effects[1], "charge ") {
		t.Fatalf("executions %q (answers %v): want the slow call, then the charge that waited for its slot", effects, order)
	}
}

// TestCancellationOfAReusedID: an agent may send a request under the id of one still being
// served. Once the first is answered, the agent's cancellation of that id still reaches the
// second (the child is told, and the second gets no answer). Before, the first request's
// cleanup removed the second's cancellation, and the cancellation was lost.
func TestCancellationOfAReusedID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap("--pass", "slow")
	send := func(line string) { t.Helper(); rw.send(t, line) }
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"ms":300,"tag":"first"}}}`)
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"ms":6000,"tag":"second"}}}`)
	if got, _ := rw.out.ReadString('\n'); !strings.Contains(got, `"id":5`) || !strings.Contains(got, "slow done") {
		t.Fatalf("want the first request's answer, got %s", got)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"agent gave up"}}`)
	waitFor(t, "the child to be told of the cancellation", func() bool { return strings.Contains(rw.log.String(), "mcptest: cancelled") })
	time.Sleep(6200 * time.Millisecond) // the child finishes the cancelled call (it ignores cancellation)
	if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":7,"method":"ping"}`); got != `{"jsonrpc":"2.0","id":7,"result":{}}` {
		t.Fatalf("the cancelled second request was answered: %s", got)
	}
}
