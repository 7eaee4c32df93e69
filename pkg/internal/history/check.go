package history

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/effectfence/effectfence/pkg/fence"
)

// Kinds of answer an Op can get.
const (
	AnswerOK       = "ok"        // the tool's result, from the call that ran it
	AnswerReplay   = "replay"    // the recorded result of an earlier run (marked in _meta)
	AnswerRefused  = "refused"   // a tool error that says the call was NOT executed
	AnswerUnknown  = "unknown"   // a tool error that says whether it ran is unknown
	AnswerNone     = "no_answer" // the wrap died or the harness gave up: a cut call
	AnswerNotSent  = "not_sent"  // the wrap was already gone: the call never left the harness
	AnswerRPCError = "rpc_error" // a JSON-RPC error
)

// Op is one call of a client, and what it got back.
type Op struct {
	N        int    `json:"n"`
	Wrap     int    `json:"wrap"`
	Gen      int    `json:"gen"`
	Op       string `json:"op"`
	StartMs  int64  `json:"start_ms"`
	EndMs    int64  `json:"end_ms"`
	Answer   string `json:"answer"`
	Exec     string `json:"exec,omitempty"`
	AnswerOp string `json:"answer_op,omitempty"`
	Code     string `json:"code,omitempty"`
	Text     string `json:"text,omitempty"`
}

// cut reports whether the caller cannot know what became of its call.
func (o Op) cut() bool { return o.Answer == AnswerUnknown || o.Answer == AnswerNone }

// Final is what the ledger holds for one op after every process stopped.
type Final struct {
	State fence.State `json:"state"`
	Exec  string      `json:"exec,omitempty"` // the execution the cert's result names (done)
}

// Violation is one broken promise found in a history. FromMs and ToMs (since the run began)
// span the op's calls and executions, to find the faults that led to it.
type Violation struct {
	Kind   string `json:"kind"`
	Op     string `json:"op"`
	Detail string `json:"detail"`
	FromMs int64  `json:"from_ms"`
	ToMs   int64  `json:"to_ms"`
}

func (v Violation) String() string { return fmt.Sprintf("%s %s: %s", v.Kind, v.Op, v.Detail) }

// Check proves on a recorded history the fence's promise, op by op (an op is one intent: the
// same tool and arguments):
//
//   - executed-twice: no op is executed more than once (counted in the child's own effects
//     file, synced before each answer);
//   - foreign-answer / phantom-answer: every successful answer (fresh or replayed) names its
//     own op's execution, and that execution is in the effects file;
//   - cert-mismatch: a done op's cert names its single execution;
//   - executed-but-free: an op that ran has a record (else its next duplicate runs it again);
//   - left-in-flight: no claim stays in flight once every holder is gone;
//   - cut-not-fenced: a call told "unknown" ends unknown, or healed (done with its one
//     execution); a call with no answer ends unknown or healed, or free with no execution;
//   - answered-then-lost: an op whose result a call was given (fresh or replayed) ends done:
//     the answer waits until the outcome is recorded in the ledger or its spool (a full disk
//     under both holds it), so no kill after it can leave the op unknown, its duplicates
//     refused though the agent saw the result;
//   - refused-but-ran, unexplained-execution: every execution (its child's wrap slot named
//     in the effects file) lies within a call of its op through that wrap that may have run
//     it: one answered with that very execution, or told "unknown", or given no answer (open
//     ended: the wrap may go on after the harness stopped waiting). A call refused as NOT
//     executed, a replay or a call never sent explains none.
//
// startUnixMs is when the run began (executions carry wall-clock times).
func Check(ops []Op, execs []Execution, final map[string]Final, startUnixMs int64) []Violation {
	byOp := map[string][]Execution{}
	byExec := map[string]Execution{}
	for _, x := range execs {
		byOp[x.Op] = append(byOp[x.Op], x)
		byExec[x.Exec] = x
	}
	opsOf := map[string][]Op{}
	names := map[string]bool{}
	for _, o := range ops {
		opsOf[o.Op] = append(opsOf[o.Op], o)
		names[o.Op] = true
	}
	for k := range byOp {
		names[k] = true
	}
	for k := range final {
		names[k] = true
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)

	var vs []Violation
	add := func(kind, op, format string, a ...any) {
		v := Violation{Kind: kind, Op: op, Detail: fmt.Sprintf(format, a...), FromMs: -1}
		widen := func(ms int64) {
			if v.FromMs < 0 || ms < v.FromMs {
				v.FromMs = ms
			}
			v.ToMs = max(v.ToMs, ms)
		}
		for _, o := range opsOf[op] {
			widen(o.StartMs)
			widen(o.EndMs)
		}
		for _, x := range byOp[op] {
			widen(x.At - startUnixMs)
		}
		vs = append(vs, v)
	}
	for _, k := range sorted {
		xs, f, have := byOp[k], final[k], false
		if _, ok := final[k]; ok {
			have = true
		}
		if len(xs) > 1 {
			add("executed-twice", k, "executed %d times: %s; answers: %s", len(xs), describeExecs(xs), describeAnswers(opsOf[k]))
		}
		for _, o := range opsOf[k] {
			if o.Answer != AnswerOK && o.Answer != AnswerReplay {
				continue
			}
			x, ok := byExec[o.Exec]
			switch {
			case o.AnswerOp != k:
				add("foreign-answer", k, "call #%d (wrap %d) was answered with op %q's result %s", o.N, o.Wrap, o.AnswerOp, o.Exec)
			case !ok:
				add("phantom-answer", k, "call #%d (wrap %d) was answered with execution %s, which the effects file lacks", o.N, o.Wrap, o.Exec)
			case x.Op != k:
				add("foreign-answer", k, "call #%d (wrap %d) was answered with execution %s of op %q", o.N, o.Wrap, o.Exec, x.Op)
			}
		}
		switch {
		case !have && len(xs) > 0:
			add("executed-but-free", k, "ran (%s) but the ledger holds no record: its next duplicate runs it again", describeExecs(xs))
		case have && f.State == fence.StateInFlight:
			add("left-in-flight", k, "still in_flight after every process stopped (%d executions)", len(xs))
		case have && f.State == fence.StateDone && len(xs) <= 1: // more is executed-twice already
			if len(xs) != 1 || xs[0].Exec != f.Exec {
				add("cert-mismatch", k, "done with a cert naming %s, but the effects file has %s", f.Exec, describeExecs(xs))
			}
		}
		for _, o := range opsOf[k] {
			if (o.Answer == AnswerOK || o.Answer == AnswerReplay) && o.AnswerOp == k && have && f.State != fence.StateDone {
				add("answered-then-lost", k, "call #%d (wrap %d) was answered with %s (%s), but the op ends %s: the agent saw a result the ledger does not hold, and its duplicates are refused", o.N, o.Wrap, o.Exec, o.Answer, f.State)
				break
			}
		}
		for _, x := range xs {
			if x.Slot == "" {
				continue // recorded before executions named their wrap
			}
			if kind, why := unexplained(x, opsOf[k], startUnixMs); kind != "" {
				add(kind, k, "execution %s (pid %d) by wrap %s's child at %.3fs: %s", x.Exec, x.Pid, x.Slot, float64(x.At-startUnixMs)/1000, why)
			}
		}
		for _, o := range opsOf[k] {
			if !o.cut() || len(xs) > 1 {
				continue
			}
			fenced := have && (f.State == fence.StateUnknown || f.State == fence.StateFailed)
			healed := have && f.State == fence.StateDone && len(xs) == 1 && xs[0].Exec == f.Exec
			untouched := !have && len(xs) == 0 && o.Answer == AnswerNone
			if !fenced && !healed && !untouched {
				state := "no record"
				if have {
					state = string(f.State)
				}
				add("cut-not-fenced", k, "call #%d (wrap %d) got %s, and the op ends %s with %d executions", o.N, o.Wrap, o.Answer, state, len(xs))
				break
			}
		}
	}
	return vs
}

// execSlack is how far an execution may lie outside the span of the call that ran it: the
// child stamps it with the wall clock, the harness times calls from the run's start.
const execSlack = 250

// unexplained judges execution x of an op against that op's calls: "" when a call through x's
// wrap may have run it; else refused-but-ran when a call through that wrap was refused as NOT
// executed meanwhile, or unexplained-execution. The wrap's slot alone is compared, not its
// generation: an HTTP client's session may reach the slot's next gateway on the same port.
func unexplained(x Execution, calls []Op, startUnixMs int64) (string, string) {
	slot, _, _ := strings.Cut(x.Slot, ".")
	t := x.At - startUnixMs
	var refused []string
	for _, o := range calls {
		if fmt.Sprint(o.Wrap) != slot || o.StartMs > t+execSlack {
			continue
		}
		switch o.Answer {
		case AnswerOK:
			if o.Exec == x.Exec && o.EndMs+execSlack >= t {
				return "", ""
			}
		case AnswerUnknown, AnswerNone, AnswerRPCError:
			return "", "" // may have run, and may run still
		case AnswerRefused:
			if o.EndMs+execSlack >= t {
				refused = append(refused, fmt.Sprintf("#%d (%.3fs to %.3fs: %s)", o.N, float64(o.StartMs)/1000, float64(o.EndMs)/1000, o.Text))
			}
		}
	}
	if len(refused) > 0 {
		return "refused-but-ran", "no call of its wrap may have run it, and " + strings.Join(refused, ", ") + " was refused as NOT executed meanwhile"
	}
	return "unexplained-execution", "no call of the op through that wrap may have run it"
}

func describeExecs(xs []Execution) string {
	if len(xs) == 0 {
		return "no execution"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%s (pid %d)", x.Exec, x.Pid)
	}
	return strings.Join(parts, ", ")
}

func describeAnswers(ops []Op) string {
	count := map[string]int{}
	for _, o := range ops {
		key := o.Answer
		if o.Exec != "" {
			key += " " + o.Exec
		}
		count[key]++
	}
	parts := make([]string, 0, len(count))
	for k, n := range count {
		parts = append(parts, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// classify turns a tools/call result into an Op's answer fields.
func classify(o *Op, res json.RawMessage) {
	var r struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           []struct {
			Text string `json:"text"`
		} `json:"content"`
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		o.Answer, o.Text = AnswerUnknown, "unparseable result: "+string(res)
		return
	}
	if len(r.Content) > 0 {
		o.Text = r.Content[0].Text
	}
	if !r.IsError {
		var a Answer
		_ = json.Unmarshal(r.StructuredContent, &a)
		o.Exec, o.AnswerOp = a.Exec, a.Op
		o.Answer = AnswerOK
		if string(r.Meta["effectfence/replayed"]) == "true" {
			o.Answer = AnswerReplay
		}
		o.Text = ""
		return
	}
	_ = json.Unmarshal(r.Meta["effectfence/code"], &o.Code)
	// Only an error that says the call was not executed counts as such; anything else, and
	// wrap's "whether it took effect is unknown", may have run.
	low := strings.ToLower(o.Text)
	switch {
	case strings.Contains(low, "whether it took effect is unknown"):
		o.Answer = AnswerUnknown
	case strings.Contains(low, "not executed"), strings.Contains(low, "did not run"):
		o.Answer = AnswerRefused
	default:
		o.Answer = AnswerUnknown
	}
}
