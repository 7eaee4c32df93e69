package wrap_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

func TestMirrorsToolsListAndInitializeByteForByte(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	d := r.direct()
	w := r.wrap()
	if string(w.InitResult()) != string(d.InitResult()) {
		t.Fatalf("initialize result differs (capabilities not forwarded?):\nwrap   %s\ndirect %s", w.InitResult(), d.InitResult())
	}
	viaWrap, err := w.ListTools(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	direct, err := d.ListTools(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if string(viaWrap) != string(direct) || string(viaWrap) != mcptest.ToolsList {
		t.Fatalf("tools/list not byte-identical:\nwrap   %s\ndirect %s", viaWrap, direct)
	}
}

func TestTwelveIdenticalConcurrentCallsRunOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	out := storm(t, w.Session, 12, "charge", `{"amount":4900,"order":"o-1"}`)
	if n := r.effectCount(); n != 1 {
		t.Fatalf("child executed the charge %d times, want 1:\n%s", n, strings.Join(mcptest.Effects(r.effects), "\n"))
	}
	first, replays := 0, 0
	for i, x := range out {
		if x.IsError || !strings.Contains(x.text(), "charged 4900") {
			t.Fatalf("answer %d is not a success: %+v", i, x)
		}
		if x.same() != out[0].same() {
			t.Fatalf("answers differ:\n%s\n%s", x.same(), out[0].same())
		}
		if x.replayed() {
			replays++
			if !strings.HasPrefix(strings.Trim(string(x.Meta["effectfence/intent"]), `"`), "wrap:charge:") || len(x.Meta["effectfence/cert"]) != 66 {
				t.Fatalf("replay not marked with intent and cert hash: %v", x.Meta)
			}
		} else {
			first++
		}
	}
	if first != 1 || replays != 11 {
		t.Fatalf("want 1 forwarded answer and 11 replays, got %d and %d", first, replays)
	}
	// The empty idempotency_key was filled with the intent's hash for the downstream service.
	intent := strings.Trim(string(out[1].Meta["effectfence/intent"]), `"`)
	if out[0].replayed() {
		intent = strings.Trim(string(out[0].Meta["effectfence/intent"]), `"`)
	}
	hash := strings.TrimPrefix(intent, "wrap:charge:")
	if line := mcptest.Effects(r.effects)[0]; !strings.Contains(line, "key="+hash) || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(hash) {
		t.Fatalf("idempotency key not injected: effect %q, intent %q", line, intent)
	}
}

func TestNoInjectKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--no-inject-key")
	call(t, w.Session, "charge", `{"amount":1}`)
	call(t, w.Session, "charge", `{"amount":2,"idempotency_key":"mine"}`)
	eff := mcptest.Effects(r.effects)
	if len(eff) != 2 || !strings.Contains(eff[0], "key= ") || !strings.Contains(eff[1], "key=mine ") {
		t.Fatalf("keys changed: %q", eff)
	}
}

func TestDifferentArgumentsRunSeparately(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	done := make(chan result, 5)
	for i := range 5 {
		go func() {
			x, err := callE(w.Session, "charge", `{"amount":`+string(rune('1'+i))+`}`)
			if err != nil {
				t.Error(err)
			}
			done <- x
		}()
	}
	for range 5 {
		if x := <-done; x.IsError || x.replayed() {
			t.Fatalf("distinct call refused or replayed: %+v", x)
		}
	}
	if n := r.effectCount(); n != 5 {
		t.Fatalf("want 5 executions, got %d", n)
	}
	// Same arguments spelled differently are the same call.
	a := call(t, w.Session, "charge", `{"amount":7,"order":"x"}`)
	b := call(t, w.Session, "charge", `{"order":"x","amount":7.0}`)
	if a.replayed() || !b.replayed() || r.effectCount() != 6 {
		t.Fatalf("key order and number spelling must not change identity: %v %v, %d effects", a.replayed(), b.replayed(), r.effectCount())
	}
}

func TestToolSlowerThanTheLeaseRunsOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// The shortest lease wrap takes (1 s); the tool runs 3.5 of them, so only heartbeats keep
	// the claim from lapsing and the waiters from running it again.
	w := r.wrap("--lease-secs", "1")
	out := storm(t, w.Session, 4, "slow", `{"ms":3500,"tag":"lease"}`)
	if n := r.effectCount(); n != 1 {
		t.Fatalf("a call slower than the lease ran %d times (heartbeats missing?)", n)
	}
	for _, x := range out {
		if x.IsError || x.same() != out[0].same() {
			t.Fatalf("answers differ or failed: %+v", out)
		}
	}
}

func TestIsErrorReleasesAndWaitersShareTheError(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	// The six must all arrive while the first attempt runs (2 s; with 400 ms one arrived after
	// it had failed and been released, at load 22, and rightly ran again).
	out := storm(t, w.Session, 6, "fail", `{"ms":2000,"tag":"f"}`)
	if n := r.effectCount(); n != 1 {
		t.Fatalf("failing call ran %d times, want 1", n)
	}
	for _, x := range out {
		if !x.IsError || x.same() != out[0].same() || !strings.Contains(x.text(), "card declined (attempt 1)") {
			t.Fatalf("waiters must receive the same error: %+v", out)
		}
	}
	// Released: a retry runs.
	if x := call(t, w.Session, "fail", `{"ms":2000,"tag":"f"}`); !strings.Contains(x.text(), "attempt 2") || r.effectCount() != 2 {
		t.Fatalf("a retry after isError must run: %+v", x)
	}
	// Duplicates that arrive while the first is already running share its failure too.
	late := make(chan result, 3)
	go func() {
		x, err := callE(w.Session, "fail", `{"ms":800,"tag":"late"}`)
		if err != nil {
			t.Error(err)
		}
		late <- x
	}()
	led := r.openLedger()
	waitFor(t, "the first late call to run (its claim in flight)", func() bool {
		n := 0
		err := led.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(*fence.Record) bool { n++; return true })
		})
		return err == nil && n == 1
	})
	for range 2 {
		go func() {
			x, err := callE(w.Session, "fail", `{"ms":800,"tag":"late"}`)
			if err != nil {
				t.Error(err)
			}
			late <- x
		}()
	}
	for range 3 {
		if x := <-late; !strings.Contains(x.text(), "card declined (attempt 3)") {
			t.Fatalf("a late duplicate did not get the running attempt's failure: %q", x.text())
		}
	}
	if n := r.effectCount(); n != 3 {
		t.Fatalf("want 3 executions, got %d", n)
	}
}

// A JSON-RPC error the server answers a fenced call with reaches the caller byte for byte,
// and so do the duplicates that waited for that attempt: they share its failure exactly.
func TestRPCErrorReachesCallerAndWaitersExactly(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	const n = 6
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := w.CallTool(ctx, "fail", json.RawMessage(`{"ms":400,"tag":"rpc","rpc":true}`))
			errs <- err
		}()
	}
	close(start)
	for range n {
		var rpc *mcpstdio.RPCError
		if err := <-errs; !errors.As(err, &rpc) || string(rpc.Raw) != mcptest.RPCRefusal {
			t.Fatalf("want the server's error object byte for byte:\n got %v (raw %s)\nwant %s", err, rawOf(rpc), mcptest.RPCRefusal)
		}
	}
	if c := r.effectCount(); c != 1 {
		t.Fatalf("the refused call ran %d times, want 1", c)
	}
}

func rawOf(e *mcpstdio.RPCError) string {
	if e == nil {
		return ""
	}
	return string(e.Raw)
}

func TestUnknownToolGetsTheChildsError(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	_, err := w.CallTool(context.Background(), "nope", json.RawMessage(`{}`))
	if err == nil || !strings.Contains(err.Error(), "unknown tool: nope") {
		t.Fatalf("want the child's JSON-RPC error, got %v", err)
	}
	// Released, not fenced: the same call gets the same answer from the child again.
	_, err = w.CallTool(context.Background(), "nope", json.RawMessage(`{}`))
	if err == nil || !strings.Contains(err.Error(), "unknown tool: nope") {
		t.Fatalf("second call: %v", err)
	}
}

func TestReadOnlyToolsPassThroughUnlessFenced(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--pass", "charge")
	for range 3 {
		call(t, w.Session, "balance", `{}`)
	}
	call(t, w.Session, "charge", `{"amount":5}`)
	call(t, w.Session, "charge", `{"amount":5}`)
	if n := r.effectCount(); n != 5 {
		t.Fatalf("reads and --pass tools must pass through: %d effects, want 5", n)
	}
	for _, flags := range [][]string{{"--fence-reads"}, {"--fence", "balance"}} {
		r2 := newRig(t)
		w2 := r2.wrap(flags...)
		call(t, w2.Session, "balance", `{}`)
		if x := call(t, w2.Session, "balance", `{}`); !x.replayed() || r2.effectCount() != 1 {
			t.Fatalf("%v: read not fenced: %+v, %d effects", flags, x, r2.effectCount())
		}
		w2.Close()
	}
}

func TestIgnoreFieldAndKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--ignore-field", "charge:note", "--key", "slow:tag")
	call(t, w.Session, "charge", `{"amount":3,"note":"t=1"}`)
	if x := call(t, w.Session, "charge", `{"amount":3,"note":"t=2"}`); !x.replayed() {
		t.Fatalf("an ignored field changed identity: %+v", x)
	}
	call(t, w.Session, "slow", `{"ms":1,"tag":"k"}`)
	x := call(t, w.Session, "slow", `{"ms":2,"tag":"k"}`)
	if !x.IsError || !strings.Contains(x.text(), "too narrow") || string(x.Meta["effectfence/code"]) != `"intent_conflict"` {
		t.Fatalf("a too-narrow key must give intent_conflict, got %+v", x)
	}
	if n := r.effectCount(); n != 2 {
		t.Fatalf("want 2 executions, got %d", n)
	}
}

func TestListChangedIsFollowed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	call(t, w.Session, "add_tool", `{}`)
	select {
	case m := <-w.notes:
		if m != "notifications/tools/list_changed" {
			t.Fatalf("got %s", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("list_changed not forwarded")
	}
	res, err := w.ListTools(context.Background(), "")
	if err != nil || !strings.Contains(string(res), `"name":"extra"`) {
		t.Fatalf("tools/list after change: %s %v", res, err)
	}
	if x := call(t, w.Session, "extra", `{}`); x.text() != "extra ran" {
		t.Fatalf("new tool: %+v", x)
	}
}

func TestResourcesAndPromptsPassThrough(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	d := r.direct()
	for _, c := range []struct{ method, params string }{
		{"resources/list", `{}`}, {"prompts/list", `{}`}, {"prompts/get", `{"name":"greet"}`},
	} {
		a, err1 := w.Call(context.Background(), c.method, json.RawMessage(c.params))
		b, err2 := d.Call(context.Background(), c.method, json.RawMessage(c.params))
		if err1 != nil || err2 != nil || string(a) != string(b) {
			t.Fatalf("%s: %s %v / %s %v", c.method, a, err1, b, err2)
		}
	}
	call(t, w.Session, "charge", `{"amount":1}`)
	for range 2 { // unfenced: read twice, both see the current state
		res, err := w.Call(context.Background(), "resources/read", json.RawMessage(`{"uri":"mem://effects"}`))
		if err != nil || !strings.Contains(string(res), "1 effects") {
			t.Fatalf("resources/read: %s %v", res, err)
		}
	}
	if _, err := w.Call(context.Background(), "no/such", json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "method not found") {
		t.Fatalf("unknown method: %v", err)
	}
}

func TestGarbageFromTheChild(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.mode = "garbage"
	w := r.wrap()
	res, err := w.ListTools(context.Background(), "")
	if err != nil || string(res) != mcptest.ToolsList {
		t.Fatalf("tools/list through a noisy child: %v", err)
	}
	storm(t, w.Session, 4, "charge", `{"amount":9}`)
	if r.effectCount() != 1 {
		t.Fatalf("want 1 execution, got %d", r.effectCount())
	}
	if !strings.Contains(w.log.String(), "not a JSON-RPC message") {
		t.Fatalf("garbage not logged: %s", w.log.String())
	}
}

func TestRequestsOfTheChildReachTheAgent(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.onRequest = func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"roots":[{"uri":"file:///agent/` + method + `"}]}`), nil
	}
	w := r.wrap() // fenced: the request arrives while the call is held
	if x := call(t, w.Session, "ask", `{}`); x.IsError || !strings.Contains(x.text(), `file:///agent/roots/list`) {
		t.Fatalf("the child's request did not reach the agent: %q", x.text())
	}
}

// A request of the child that the child then cancels: the agent is told, under the id wrap
// gave the request (never the child's own id), and its handler's context ends with the
// child's reason.
func TestTheChildCancelsItsRequest(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cause := make(chan error, 1)
	r.onRequest = func(ctx context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	}
	w := r.wrap("--pass", "ask")
	if x := call(t, w.Session, "ask", `{"ms":300}`); x.IsError || x.text() != "ask cancelled" {
		t.Fatalf("ask: %q", x.text())
	}
	select {
	case err := <-cause:
		var why *mcpstdio.CancelReason
		if !errors.As(err, &why) || why.Reason != "took too long" {
			t.Fatalf("the agent's handler ended with %v, want the child's cancellation", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent was never told that the child cancelled its request")
	}
}

func TestWaitEndsWithAToolErrorAndARetryReplays(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--wait", "200ms")
	first := make(chan result, 1)
	go func() {
		x, err := callE(w.Session, "slow", `{"ms":1200,"tag":"wait"}`)
		if err != nil {
			t.Error(err)
		}
		first <- x
	}()
	waitFor(t, "the first call to reach the server", func() bool { return strings.Contains(w.log.String(), "mcptest: slow tag=wait started") })
	x := call(t, w.Session, "slow", `{"ms":1200,"tag":"wait"}`)
	if !x.IsError || string(x.Meta["effectfence/code"]) != `"intent_in_flight"` || !strings.Contains(x.text(), "NOT executed a second time") || !strings.Contains(x.text(), "retry") {
		t.Fatalf("a duplicate that outwaits --wait must get a tool error: %+v", x.text())
	}
	f := <-first
	if again := call(t, w.Session, "slow", `{"ms":1200,"tag":"wait"}`); !again.replayed() || again.same() != f.same() || r.effectCount() != 1 {
		t.Fatalf("the retry must receive the recorded result: %+v", again)
	}
}

// A result asking for more input (SEP-2322 input_required) is not an outcome: it is never
// replayed; the continuation (the same call with requestState, under a new id) runs once and
// its result is what duplicates, continuation or original, receive.
func TestInputRequiredIsNeverAnOutcome(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	ctx := context.Background()
	raw := func(params string) string {
		t.Helper()
		res, err := w.Call(ctx, "tools/call", json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		return string(res)
	}
	first := `{"name":"confirm","arguments":{"tag":"mrtr"}}`
	cont := `{"name":"confirm","arguments":{"tag":"mrtr"},"inputResponses":{"ok":{"action":"accept","content":{"ok":true}}},"requestState":"state-mrtr"}`
	for i := 0; i < 2; i++ {
		if got := raw(first); !strings.Contains(got, `"resultType":"input_required"`) || strings.Contains(got, "effectfence/replayed") {
			t.Fatalf("round one, try %d: %s; want the server's input_required, never a replay", i, got)
		}
	}
	done := raw(cont)
	if !strings.Contains(done, "confirmed n=1") {
		t.Fatalf("continuation: %s", done)
	}
	for _, p := range []string{cont, first} {
		if got := raw(p); !strings.Contains(got, "confirmed n=1") || !strings.Contains(got, `"effectfence/replayed":true`) {
			t.Fatalf("after the continuation ran, %s was answered %s; want its recorded result", p, got)
		}
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// TestUnlistedToolIsFenced is docs/wrap.md's "a tool missing from [the listing] is fenced": the
// server runs a tool it never lists, so wrap knows nothing of it (is it read-only?). Calls of
// it take the safe side: an identical second call is a replay, and the server ran it once.
func TestUnlistedToolIsFenced(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	if res, err := w.ListTools(context.Background(), ""); err != nil || strings.Contains(string(res), `"name":"unlisted"`) {
		t.Fatalf("the server's listing: %s, %v; want it without the tool", res, err)
	}
	first := call(t, w.Session, "unlisted", `{"tag":"u"}`)
	again := call(t, w.Session, "unlisted", `{"tag":"u"}`)
	if first.IsError || first.replayed() || !again.replayed() || r.effectCount() != 1 {
		t.Fatalf("an unlisted tool called twice: %q then %q (replayed %v), %d executions; want one execution and a replay", first.text(), again.text(), again.replayed(), r.effectCount())
	}
}
