package probe

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

func TestFingerprintIgnoresMetaAndSpelling(t *testing.T) {
	base := `{"content":[{"type":"text","text":"charged ch_1"}],"structuredContent":{"id":"ch_1","amount":4900}}`
	same := []string{
		`{"structuredContent":{"amount":4900,"id":"ch_1"},"content":[{"text":"charged ch_1","type":"text"}]}`,
		`{"content":[{"type":"text","text":"charged ch_1"}],"structuredContent":{"id":"ch_1","amount":4.9e3},"_meta":{"effectfence/replayed":true}}`,
		`{"content":[{"type":"text","text":"charged ch_1"}],"structuredContent":{"id":"ch_1","amount":4900},"isError":false}`,
	}
	different := []string{
		`{"content":[{"type":"text","text":"charged ch_2"}],"structuredContent":{"id":"ch_1","amount":4900}}`,
		`{"content":[{"type":"text","text":"charged ch_1"}],"structuredContent":{"id":"ch_2","amount":4900}}`,
		`{"content":[{"type":"text","text":"charged ch_1"}],"structuredContent":{"id":"ch_1","amount":4900},"isError":true}`,
		`{"content":[{"type":"text","text":"charged ch_1"}]}`,
	}
	want, _, preview, err := Fingerprint(json.RawMessage(base))
	if err != nil {
		t.Fatal(err)
	}
	if preview != "charged ch_1" {
		t.Errorf("preview = %q", preview)
	}
	for _, s := range same {
		got, _, _, err := Fingerprint(json.RawMessage(s))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: fingerprint differs from the same answer spelled differently", s)
		}
	}
	for _, s := range different {
		got, _, _, err := Fingerprint(json.RawMessage(s))
		if err != nil {
			t.Fatal(err)
		}
		if got == want {
			t.Errorf("%s: fingerprint equals a different answer's", s)
		}
	}
	if _, _, _, err := Fingerprint(json.RawMessage(`[1]`)); err == nil {
		t.Error("an array result was accepted")
	}
}

func TestParseArgs(t *testing.T) {
	for _, ok := range []string{`{}`, `{"amount":4900}`, ` {"a":[1,2]} `} {
		if _, err := ParseArgs(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		``:           "empty",
		`[1]`:        "an array",
		`"x"`:        "a string",
		`42`:         "a number",
		`null`:       "null",
		`{"a":`:      "not valid JSON",
		`{} {}`:      "text after",
		`{"a":1} x`:  "text after",
		`tru`:        "not valid JSON",
		`{'a': 1}`:   "not valid JSON",
		`    `:       "empty",
		`true`:       "a boolean",
		`[{"a":1}]`:  "an array",
		`{"a":1}}`:   "text after",
		`{"a":1}, 2`: "text after",
	} {
		_, err := ParseArgs(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseArgs(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestValidate(t *testing.T) {
	good := Options{Tool: "t", Args: json.RawMessage(`{}`), Calls: 12}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(o *Options){
		"--tool is required":         func(o *Options) { o.Tool = " " },
		"--calls must be at least 1": func(o *Options) { o.Calls = 0 },
		"at most":                    func(o *Options) { o.Calls = MaxCalls + 1 },
		"must be a JSON object":      func(o *Options) { o.Args = json.RawMessage(`[]`) },
	}
	for want, mutate := range cases {
		o := good
		mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}

func TestParseCount(t *testing.T) {
	for in, want := range map[string]int64{"12\n": 12, "  7 effects.log\n": 7, "count\n-----\n 3\n": 3, "0": 0} {
		got, err := ParseCount(in)
		if err != nil || got != want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "  \n", "twelve", "1.5"} {
		if _, err := ParseCount(in); err == nil {
			t.Errorf("ParseCount(%q) accepted", in)
		}
	}
}

// results builds answers from tool-result JSON texts.
func results(texts ...string) []answer {
	out := make([]answer, len(texts))
	for i, s := range texts {
		out[i] = answer{result: json.RawMessage(s)}
	}
	return out
}

func ok(text string) string {
	return `{"content":[{"type":"text","text":"` + text + `"}]}`
}

func toolErr(text string) string {
	return `{"content":[{"type":"text","text":"` + text + `"}],"isError":true}`
}

func TestJudge(t *testing.T) {
	opts := Options{Tool: "t", Args: json.RawMessage(`{}`)}
	transport := answer{err: errors.New("connection closed")}
	rpc := answer{err: &mcpstdio.RPCError{Code: -32603, Message: "internal"}}
	cases := []struct {
		name     string
		answers  []answer
		witness  *WitnessReport
		verdict  Verdict
		distinct int
		proven   string
	}{
		{"all different", results(ok("a"), ok("b"), ok("c")), nil, DoubleFire, 3, "at least 3 separate times"},
		{"two of three", results(ok("a"), ok("a"), ok("b")), nil, DoubleFire, 2, "at least 2"},
		{"all equal", results(ok("a"), ok("a"), ok("a")), nil, Inconclusive, 1, "all with the same answer"},
		{"one success, rest refused", results(ok("a"), toolErr("busy"), toolErr("busy")), nil, NoRaceSurface, 1, "exactly 1 of 3"},
		{"one success, rest protocol errors", append(results(ok("a")), rpc, rpc), nil, NoRaceSurface, 1, "2 protocol errors"},
		{"one success, rest lost", append(results(ok("a")), transport, transport), nil, Inconclusive, 1, "1 of 3 byte-identical calls succeeded."},
		{"nothing succeeded", append(results(toolErr("x")), transport), nil, Inconclusive, 0, "no call succeeded"},
		{"equal answers, executions 3", results(ok("a"), ok("a"), ok("a")), &WitnessReport{Kind: Executions, Before: 5, After: 8, Effects: 3}, DoubleFire, 1, "counted 3 executions"},
		{"equal answers, executions 1", results(ok("a"), ok("a"), ok("a")), &WitnessReport{Kind: Executions, Before: 5, After: 6, Effects: 1}, OnceMeasured, 1, "exactly 1 execution"},
		{"different answers, executions 1", results(ok("a"), ok("b")), &WitnessReport{Kind: Executions, Before: 0, After: 1, Effects: 1}, OnceMeasured, 2, "exactly 1 execution"},
		{"equal answers, executions 0", results(ok("a"), ok("a"), ok("a")), &WitnessReport{Kind: Executions, Before: 4, After: 4}, Inconclusive, 1, "counted no execution"},
		{"different answers, executions 0", results(ok("a"), ok("b")), &WitnessReport{Kind: Executions, Before: 4, After: 4}, DoubleFire, 2, "at least 2"},
		// A state reading never decides: one change may hide many executions, and a size may
		// grow by more than one for one effect.
		{"equal answers, state 1", results(ok("a"), ok("a"), ok("a")), &WitnessReport{Kind: State, Before: 5, After: 6, Effects: 1}, Inconclusive, 1, "all with the same answer"},
		{"equal answers, state 3", results(ok("a"), ok("a"), ok("a")), &WitnessReport{Kind: State, Before: 5, After: 8, Effects: 3}, Inconclusive, 1, "all with the same answer"},
		{"different answers, state 1", results(ok("a"), ok("b")), &WitnessReport{Kind: State, Before: 0, After: 1, Effects: 1}, DoubleFire, 2, "at least 2"},
		{"single call", results(ok("a")), nil, Inconclusive, 1, "only 1 call was sent"},
		// One call, one execution: no duplicate was sent, so nothing is proven once.
		{"single call, executions 1", results(ok("a")), &WitnessReport{Kind: Executions, Before: 0, After: 1, Effects: 1}, Inconclusive, 1, "only 1 call was sent"},
		{"single call, executions 2", results(ok("a")), &WitnessReport{Kind: Executions, Before: 0, After: 2, Effects: 2}, DoubleFire, 1, "counted 2 executions"},
		{"single call lost, executions 1", []answer{transport}, &WitnessReport{Kind: Executions, Before: 0, After: 1, Effects: 1}, Inconclusive, 0, "only 1 call was sent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := tally(opts, c.answers)
			r.Witness = c.witness
			r.judge()
			if r.Verdict != c.verdict || r.Distinct != c.distinct {
				t.Fatalf("verdict %s distinct %d, want %s %d", r.Verdict, r.Distinct, c.verdict, c.distinct)
			}
			if !strings.Contains(r.Proven, c.proven) {
				t.Errorf("proven = %q, want it to say %q", r.Proven, c.proven)
			}
			if strings.Contains(r.NotProven, "once or 1 times") || strings.Contains(r.NotProven, "or 0 times") {
				t.Errorf("not proven = %q", r.NotProven)
			}
			if r.NotProven == "" || r.Headline == "" {
				t.Error("a verdict without its limits")
			}
			if c.witness != nil && c.witness.Kind == State && (r.Verdict == OnceMeasured || strings.Contains(r.Headline, "ONCE") || len(r.Notes) == 0) {
				t.Errorf("a state witness claimed once or went unexplained: %s %v", r.Headline, r.Notes)
			}
			if got := r.Succeeded + r.ToolErrors + r.ProtocolErrors + r.TransportFailures; got != len(c.answers) {
				t.Errorf("buckets add up to %d, want %d", got, len(c.answers))
			}
		})
	}
}

// TestJudgeDifferentToolErrors: no call succeeded, so nothing is proven about a double-fire,
// but tool errors that differ ("attempt 1", "attempt 2") show the server handled the call more
// than once, and the report says so.
func TestJudgeDifferentToolErrors(t *testing.T) {
	r := tally(Options{Tool: "t", Args: json.RawMessage(`{}`)}, results(toolErr("declined (attempt 1)"), toolErr("declined (attempt 2)")))
	r.judge()
	if r.Verdict != Inconclusive || r.DistinctErrors != 2 || !strings.Contains(strings.Join(r.Notes, " "), "the tool errors differed (2 distinct)") {
		t.Fatalf("verdict %s, distinct errors %d, notes %q", r.Verdict, r.DistinctErrors, r.Notes)
	}
	r = tally(Options{Tool: "t", Args: json.RawMessage(`{}`)}, results(toolErr("declined"), toolErr("declined")))
	r.judge()
	if len(r.Notes) != 0 {
		t.Fatalf("equal errors noted: %q", r.Notes)
	}
}

// TestWrapsNotKeptNoticeMarkedIsErrorIsNotAToolError: wrap's notice to a duplicate of a call
// whose result it kept as a hash is marked isError for a tool with an output schema (so SDK
// clients take it); it is still counted as that notice, not as the tool refusing the call,
// which made a storm through wrap read "no race surface observed".
func TestWrapsNotKeptNoticeMarkedIsErrorIsNotAToolError(t *testing.T) {
	notice := `{"content":[{"type":"text","text":"effectfence: already executed"}],"isError":true,` +
		`"_meta":{"effectfence/replayed":true,"effectfence/result_not_kept":true}}`
	r := tally(Options{Tool: "t", Args: json.RawMessage(`{}`)}, results(ok("ch_1"), notice, notice))
	r.judge()
	if r.Succeeded != 3 || r.ToolErrors != 0 || r.ResultNotKept != 2 || r.Distinct != 1 || r.DistinctErrors != 0 || r.Verdict != Inconclusive {
		t.Fatalf("succeeded %d, tool errors %d, not kept %d, distinct %d (errors %d), verdict %s",
			r.Succeeded, r.ToolErrors, r.ResultNotKept, r.Distinct, r.DistinctErrors, r.Verdict)
	}
}

func TestReportRendersWithoutColourAndAsJSON(t *testing.T) {
	r := tally(Options{Tool: "charge_card", Args: json.RawMessage(`{"amount":4900}`)},
		append(results(ok("ch_1"), ok("ch_2"), toolErr("declined")), answer{err: errors.New("EOF")}))
	r.Witness = &WitnessReport{Command: "wc -l < f", Kind: Executions, Before: 0, After: 2, Effects: 2}
	r.judge()
	var text bytes.Buffer
	if err := r.WriteText(&text, false); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{"PROVEN DOUBLE-FIRE", "ch_1", "declined", "0 → 2", "transport: EOF", "not proven:"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour escapes without colour")
	}
	var coloured bytes.Buffer
	if err := r.WriteText(&coloured, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(coloured.String(), "\x1b[") {
		t.Error("no colour escapes when colour was asked for")
	}
	b, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Verdict != DoubleFire || back.Distinct != 2 || back.ToolErrors != 1 || back.TransportFailures != 1 || back.Witness.Effects != 2 {
		t.Errorf("JSON round trip lost numbers: %+v", back)
	}
}
