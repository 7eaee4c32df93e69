package history

import (
	"slices"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestCheck feeds Check small histories, each with one broken promise (or none), and expects
// exactly the violations named.
func TestCheck(t *testing.T) {
	x := func(exec, op string) Execution { return Execution{Exec: exec, Op: op, Pid: 1} }
	ok := func(op, exec string) Op { return Op{Op: op, Answer: AnswerOK, Exec: exec, AnswerOp: op} }
	done := func(exec string) Final { return Final{State: fence.StateDone, Exec: exec} }
	// A call of op through wrap (generation 1), from start to end ms.
	at := func(op string, wrap int, answer, exec string, start, end int64) Op {
		o := Op{Wrap: wrap, Gen: 1, Op: op, Answer: answer, Exec: exec, StartMs: start, EndMs: end}
		if exec != "" {
			o.AnswerOp = op
		}
		return o
	}
	for _, c := range []struct {
		name  string
		ops   []Op
		execs []Execution
		final map[string]Final
		want  []string
	}{
		{"clean: one run, a replay, a fenced cut call, an untouched cut call",
			[]Op{ok("a", "xa"), {Op: "a", Answer: AnswerReplay, Exec: "xa", AnswerOp: "a"}, {Op: "b", Answer: AnswerUnknown}, {Op: "c", Answer: AnswerNone}},
			[]Execution{x("xa", "a"), x("xb", "b")},
			map[string]Final{"a": done("xa"), "b": {State: fence.StateUnknown}}, nil},
		{"healed: a cut call whose op ends done with its one execution",
			[]Op{{Op: "a", Answer: AnswerNone}}, []Execution{x("xa", "a")}, map[string]Final{"a": done("xa")}, nil},
		{"executed twice", []Op{ok("a", "x1"), ok("a", "x2")}, []Execution{x("x1", "a"), x("x2", "a")}, map[string]Final{"a": done("x2")}, []string{"executed-twice"}},
		{"answered with another op's execution", []Op{ok("a", "xb"), ok("b", "xb")}, []Execution{x("xb", "b"), x("xa", "a")}, map[string]Final{"a": done("xa"), "b": done("xb")}, []string{"foreign-answer"}},
		{"answered with an execution nobody recorded", []Op{ok("a", "x9")}, []Execution{x("xa", "a")}, map[string]Final{"a": done("xa")}, []string{"phantom-answer"}},
		{"cert names another execution", []Op{{Op: "a", Answer: AnswerNone}}, nil, map[string]Final{"a": done("x7")}, []string{"cert-mismatch", "cut-not-fenced"}},
		{"ran but the ledger let it go", []Op{ok("a", "xa")}, []Execution{x("xa", "a")}, map[string]Final{}, []string{"executed-but-free"}},
		{"claim left in flight", []Op{{Op: "a", Answer: AnswerNone}}, nil, map[string]Final{"a": {State: fence.StateInFlight}}, []string{"left-in-flight", "cut-not-fenced"}},
		{"told unknown, ledger free", []Op{{Op: "a", Answer: AnswerUnknown}}, nil, map[string]Final{}, []string{"cut-not-fenced"}},
		{"given the result, then the outcome lost", []Op{ok("a", "xa")}, []Execution{x("xa", "a")}, map[string]Final{"a": {State: fence.StateUnknown}}, []string{"answered-then-lost"}},
		{"a replay, then the outcome lost", []Op{{Op: "a", Answer: AnswerReplay, Exec: "xa", AnswerOp: "a"}, {Op: "a", Answer: AnswerNone}}, []Execution{x("xa", "a")}, map[string]Final{"a": {State: fence.StateUnknown}}, []string{"answered-then-lost"}},
		// Executions that name their wrap are judged against that wrap's calls of the op.
		{"run by its own call, or by a call told unknown or not answered, or not yet answered when the harness gave up",
			[]Op{at("a", 0, AnswerOK, "xa", 100, 600), at("b", 1, AnswerUnknown, "", 100, 200), at("c", 2, AnswerNone, "", 100, 200), at("a", 0, AnswerRefused, "", 150, 160)},
			[]Execution{{Exec: "xa", Op: "a", Slot: "0.1", At: 500}, {Exec: "xb", Op: "b", Slot: "1.2", At: 900}, {Exec: "xc", Op: "c", Slot: "2.1", At: 60000}},
			map[string]Final{"a": done("xa"), "b": {State: fence.StateUnknown}, "c": {State: fence.StateUnknown}}, nil},
		{"run while its wrap's only call was refused as NOT executed",
			[]Op{at("a", 0, AnswerRefused, "", 100, 600), at("a", 1, AnswerOK, "xa", 700, 900)},
			[]Execution{{Exec: "xa", Op: "a", Slot: "0.1", At: 500}}, map[string]Final{"a": done("xa")}, []string{"refused-but-ran"}},
		{"run by a wrap that had no call of the op then",
			[]Op{at("a", 0, AnswerOK, "xa", 100, 200)},
			[]Execution{{Exec: "xa", Op: "a", Slot: "0.1", At: 5000}}, map[string]Final{"a": done("xa")}, []string{"unexplained-execution"}},
		{"a replay on its wrap explains no execution",
			[]Op{at("a", 0, AnswerReplay, "xa", 100, 600), at("a", 1, AnswerOK, "xa", 100, 600)},
			[]Execution{{Exec: "xa", Op: "a", Slot: "0.3", At: 400}}, map[string]Final{"a": done("xa")}, []string{"unexplained-execution"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, v := range Check(c.ops, c.execs, c.final, 0) {
				got = append(got, v.Kind)
			}
			slices.Sort(got)
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("violations %v, want %v", got, want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct{ res, answer string }{
		{`{"content":[{"type":"text","text":"executed a as x1"}],"structuredContent":{"exec":"x1","op":"a"},"isError":false}`, AnswerOK},
		{`{"content":[{"type":"text","text":"executed a as x1"}],"structuredContent":{"exec":"x1","op":"a"},"_meta":{"effectfence/replayed":true}}`, AnswerReplay},
		{`{"content":[{"type":"text","text":"effectfence: an earlier identical call has an unknown outcome, so this call was NOT executed again"}],"isError":true}`, AnswerRefused},
		{`{"content":[{"type":"text","text":"effectfence: the MCP server failed during this call (x), so whether it took effect is unknown. It will NOT be executed again automatically."}],"isError":true}`, AnswerUnknown},
		{`{"content":[{"type":"text","text":"something odd"}],"isError":true}`, AnswerUnknown},
	} {
		var o Op
		classify(&o, []byte(c.res))
		if o.Answer != c.answer {
			t.Errorf("%s: answer %s, want %s", c.res, o.Answer, c.answer)
		}
	}
}
