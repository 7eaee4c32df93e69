package probe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Verdict is the probe's conclusion, as a stable machine-readable code.
type Verdict string

const (
	// DoubleFire: more than one distinct successful answer, or a witness that counted more
	// than one effect.
	DoubleFire Verdict = "double_fire"
	// OnceMeasured: an executions witness counted exactly one execution. A state witness
	// never gives this verdict: collapsed state proves nothing about executions.
	OnceMeasured Verdict = "once_measured"
	// NoRaceSurface: exactly one call succeeded and every other one was refused by the server.
	NoRaceSurface Verdict = "no_race_surface"
	// Inconclusive: the answers cannot tell one execution from many.
	Inconclusive Verdict = "inconclusive"
)

// Headline is the verdict as the report prints it.
func (v Verdict) Headline() string {
	switch v {
	case DoubleFire:
		return "PROVEN DOUBLE-FIRE"
	case OnceMeasured:
		return "EXACTLY ONCE (1 execution counted by the witness)"
	case NoRaceSurface:
		return "no race surface observed"
	}
	return "INCONCLUSIVE from responses"
}

// Answer is one distinct answer and how many calls received it.
type Answer struct {
	Fingerprint string `json:"fingerprint"` // hex SHA-256 of JCS {content, structuredContent, isError}
	Calls       int    `json:"calls"`
	IsError     bool   `json:"is_error"`
	Preview     string `json:"preview"`
	// NotKept marks effectfence wrap's notice to a duplicate of a call whose result it kept
	// only as a hash (--keep-result TOOL=hash): not an answer of the tool, so it is not counted
	// among the distinct answers.
	NotKept bool `json:"result_not_kept,omitempty"`
}

// Failure is one distinct call failure (no tool result) and how many calls hit it.
type Failure struct {
	Kind    string `json:"kind"` // "protocol" (a JSON-RPC error response) or "transport"
	Message string `json:"message"`
	Calls   int    `json:"calls"`
}

// Report is everything a probe observed and concluded. Its JSON form is the --json output.
type Report struct {
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args"`
	Calls   int             `json:"calls"`
	Pattern Pattern         `json:"pattern"` // storm or retry
	// RetriesBeforeAnswer counts, in the retry pattern, calls sent while the previous one
	// was still unanswered (it had timed out from the caller's side).
	RetriesBeforeAnswer int `json:"retries_before_answer"`

	Succeeded         int `json:"succeeded"`          // results with isError false, and wrap's not-kept notices
	ToolErrors        int `json:"tool_errors"`        // results with isError true (but wrap's not-kept notices)
	ProtocolErrors    int `json:"protocol_errors"`    // JSON-RPC error responses
	TransportFailures int `json:"transport_failures"` // no answer: connection lost, timeout
	NotSent           int `json:"not_sent"`           // never sent: --timeout passed first (retry pattern), or the server was gone
	// notReached counts the calls of NotSent that were never written because the server had
	// already exited or closed its stdin (mcpstdio.ErrNotSent): they did not run.
	notReached     int
	Distinct       int `json:"distinct"`        // distinct successful answers of the tool
	DistinctErrors int `json:"distinct_errors"` // distinct tool-error answers
	// ResultNotKept counts the successful answers that were effectfence wrap's notice that an
	// identical call had already run and its result was kept only as a hash: the duplicate was
	// not executed, and the notice is not a second answer of the tool. A notice is counted so
	// whether or not it is marked isError (wrap marks it so for a tool with an output schema).
	ResultNotKept int `json:"result_not_kept"`
	// Replayed counts the answers effectfence wrap marked as replayed ("effectfence/replayed"
	// in _meta): recorded results given to duplicates, not new runs of the tool.
	Replayed int `json:"replayed"`

	Answers  []Answer       `json:"answers"`
	Failures []Failure      `json:"failures"`
	Witness  *WitnessReport `json:"witness,omitempty"`
	// WitnessError says why the witness's reading after the calls failed (the calls were
	// made; Witness is then nil and the verdict rests on the answers).
	WitnessError string `json:"witness_error,omitempty"`

	Verdict   Verdict  `json:"verdict"`
	Headline  string   `json:"headline"`
	Proven    string   `json:"proven"`
	NotProven string   `json:"not_proven"`
	Notes     []string `json:"notes"`
}

// Answered is the number of calls that got a tool result (successful or not).
func (r *Report) Answered() int { return r.Succeeded + r.ToolErrors }

// toolResult is the part of a CallToolResult that identifies an answer; _meta is left out on
// purpose (servers and proxies put per-call bookkeeping there).
type toolResult struct {
	Content           json.RawMessage `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

// Fingerprint returns the hex SHA-256 of the RFC 8785 canonical JSON of the result's
// {content, structuredContent, isError}; missing fields count as null (isError as false), and
// _meta and any other field are ignored. It also reports isError and a short preview.
func Fingerprint(result json.RawMessage) (fp string, isError bool, preview string, err error) {
	var tr toolResult
	if t := bytes.TrimLeft(result, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		// encoding/json takes null into a struct without a word: a "result": null is no
		// answer of the tool, and counted as one it read as a distinct successful answer.
		return "", false, "", fmt.Errorf("tool result is not a JSON object: %.40s", result)
	}
	if err := json.Unmarshal(result, &tr); err != nil {
		return "", false, "", fmt.Errorf("tool result is not a JSON object: %v", err)
	}
	tr.Content = withoutFenceNotes(tr.Content)
	null := json.RawMessage("null")
	if len(tr.Content) == 0 {
		tr.Content = null
	}
	if len(tr.StructuredContent) == 0 {
		tr.StructuredContent = null
	}
	c, err := canon.Marshal(tr)
	if err != nil {
		return "", false, "", err
	}
	return canon.Sum(c), tr.IsError, previewOf(tr), nil
}

// fenceMarks reads what effectfence wrap says in a result's _meta: replayed (a recorded result
// given to a duplicate, not a new run) and result_not_kept (its notice to a duplicate of a call
// whose result was kept only as a hash: the text, which says when the first one ran, is not
// the tool's).
func fenceMarks(result json.RawMessage) (replayed, notKept bool) {
	var x struct {
		Meta struct {
			Replayed bool `json:"effectfence/replayed"`
			NotKept  bool `json:"effectfence/result_not_kept"`
		} `json:"_meta"`
	}
	if json.Unmarshal(result, &x) != nil {
		return false, false
	}
	return x.Meta.Replayed, x.Meta.NotKept
}

// withoutFenceNotes drops the text item effectfence wrap appends to a replayed result (marked
// "effectfence/note" in its _meta): it says the result was replayed, it is not a second answer
// of the tool.
func withoutFenceNotes(content json.RawMessage) json.RawMessage {
	if !bytes.Contains(content, []byte(`"effectfence/note"`)) {
		return content
	}
	var items []json.RawMessage
	if json.Unmarshal(content, &items) != nil {
		return content
	}
	kept := items[:0]
	for _, it := range items {
		var x struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		if json.Unmarshal(it, &x) == nil && x.Meta["effectfence/note"] != nil {
			continue
		}
		kept = append(kept, it)
	}
	out, err := json.Marshal(kept)
	if err != nil {
		return content
	}
	return out
}

// previewOf shows the first text block, else the structured content, in one short line.
func previewOf(tr toolResult) string {
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(tr.Content, &blocks) == nil {
		for _, b := range blocks {
			if b.Type == "text" {
				return clip(oneLine(b.Text), 72)
			}
		}
		if len(blocks) > 0 {
			return fmt.Sprintf("(%d %s block(s))", len(blocks), blocks[0].Type)
		}
	}
	if string(tr.StructuredContent) != "null" {
		return clip(oneLine(string(tr.StructuredContent)), 72)
	}
	return "(empty result)"
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// tally groups the answers; it does not judge.
func tally(opts Options, answers []answer) *Report {
	r := &Report{Tool: opts.Tool, Args: opts.Args, Calls: len(answers), Answers: []Answer{}, Failures: []Failure{}, Notes: []string{}}
	byFP := map[string]*Answer{}
	byFail := map[[2]string]*Failure{}
	var order []string
	var failOrder [][2]string
	fail := func(kind, msg string) {
		k := [2]string{kind, msg}
		if f, ok := byFail[k]; ok {
			f.Calls++
			return
		}
		byFail[k] = &Failure{Kind: kind, Message: msg, Calls: 1}
		failOrder = append(failOrder, k)
	}
	for _, a := range answers {
		if errors.Is(a.err, errNotSent) {
			r.NotSent++
			continue
		}
		if errors.Is(a.err, mcpstdio.ErrNotSent) {
			// Never written to the server (it had exited): not a call that may have run.
			// Before 2026-12-07 these were transport failures "whether they executed is
			// unknown", and the report said they were sent.
			r.NotSent++
			r.notReached++
			continue
		}
		if a.err != nil {
			var rpc *mcpstdio.RPCError
			if errors.As(a.err, &rpc) {
				r.ProtocolErrors++
				fail("protocol", rpc.Error())
			} else {
				r.TransportFailures++
				fail("transport", a.err.Error())
			}
			continue
		}
		fp, isErr, preview, err := Fingerprint(a.result)
		if err != nil {
			r.ProtocolErrors++
			fail("protocol", err.Error())
			continue
		}
		replayed, notKept := fenceMarks(a.result)
		if notKept {
			// wrap's notice that the call ran before and its result was not kept, not an answer
			// of the tool, even marked isError (it is for a tool with an output schema, which
			// SDK clients refuse without structuredContent otherwise).
			isErr = false
		}
		if replayed {
			r.Replayed++
		}
		switch {
		case isErr:
			r.ToolErrors++
		case notKept:
			r.Succeeded++
			r.ResultNotKept++
		default:
			r.Succeeded++
		}
		if x, ok := byFP[fp]; ok {
			x.Calls++
			continue
		}
		byFP[fp] = &Answer{Fingerprint: fp, Calls: 1, IsError: isErr, Preview: preview, NotKept: notKept}
		order = append(order, fp)
		switch {
		case isErr:
			r.DistinctErrors++
		case !notKept:
			r.Distinct++
		}
	}
	for _, fp := range order {
		r.Answers = append(r.Answers, *byFP[fp])
	}
	// Most frequent first; ties by preview so the order does not depend on timing.
	sort.SliceStable(r.Answers, func(i, j int) bool {
		a, b := r.Answers[i], r.Answers[j]
		if a.Calls != b.Calls {
			return a.Calls > b.Calls
		}
		if a.IsError != b.IsError {
			return !a.IsError
		}
		return a.Preview < b.Preview
	})
	for _, k := range failOrder {
		r.Failures = append(r.Failures, *byFail[k])
	}
	sort.SliceStable(r.Failures, func(i, j int) bool { return r.Failures[i].Calls > r.Failures[j].Calls })
	return r
}

// judge sets the verdict and says exactly what was and was not proven. An executions
// witness that moved is stronger evidence than the answers and decides; a state witness never
// decides (it is reported beside the answers); answers decide otherwise.
func (r *Report) judge() {
	n := r.Calls - r.NotSent
	calls := fmt.Sprintf("%d byte-identical calls", n)
	if r.Pattern == Retry {
		calls = fmt.Sprintf("%d byte-identical calls sent one after another (each after the previous answer or a timeout)", n)
	}
	w := r.Witness
	counts := w != nil && w.Kind == Executions
	switch {
	case counts && w.Effects > 1:
		r.Verdict = DoubleFire
		r.Proven = fmt.Sprintf("the witness counted %d executions (%d before, %d after) from %s: the tool ran %d times, not once.",
			w.Effects, w.Before, w.After, calls, w.Effects)
		r.NotProven = "that nothing but this probe moved the witness's number in the meantime (run it where nothing else writes)."
		if r.Distinct > 1 {
			r.Proven += fmt.Sprintf(" The answers agree: %d distinct successful answers.", r.Distinct)
		}
	case n == 1 && (counts && w.Effects == 1 || !counts && r.Succeeded > 0):
		// One call sent (--calls 1, or --timeout passed before the second one's turn): there
		// was no duplicate, so one execution is what any tool gives and proves nothing.
		r.Verdict = Inconclusive
		r.Proven = "only 1 call was sent, and it succeeded."
		if counts {
			r.Proven = fmt.Sprintf("only 1 call was sent, and the witness counted 1 execution (%d before, %d after).", w.Before, w.After)
		}
		r.NotProven = "anything about duplicates: no duplicate was sent, so nothing could run twice. Send more than one call (--calls 12) to see what the server does with them."
	case counts && w.Effects == 1:
		r.Verdict = OnceMeasured
		r.Proven = fmt.Sprintf("the witness counted exactly 1 execution (%d before, %d after) for %s.", w.Before, w.After, calls)
		r.NotProven = "that it will always be once: this is one run, under this timing, with this witness; and that the witness really counts every execution (--witness-kind executions says so; if it reads state, it cannot)."
		if r.Distinct > 1 {
			r.Notes = append(r.Notes, fmt.Sprintf("the successful answers differed (%d distinct) although one execution was counted: they carry something per call (a timestamp, a request id).", r.Distinct))
		}
	case r.Distinct > 1:
		r.Verdict = DoubleFire
		r.Proven = fmt.Sprintf("%s got %d different successful answers: the server executed the call at least %d separate times instead of once.",
			calls, r.Distinct, r.Distinct)
		r.NotProven = "that every execution had an outside effect: an answer that carries a timestamp or a per-call id differs too, and so does a server that notices the duplicate and answers it differently (\"already charged\"). Add a --witness that counts executions to count them."
	case counts && w.Effects == 0 && r.Succeeded > 0:
		// An executions witness that saw no run while calls succeeded: the answers came from a
		// record (a second probe through wrap's durable ledger), or the witness misses the effect.
		r.Verdict = Inconclusive
		r.Proven = fmt.Sprintf("the witness counted no execution (%d before and after) while %d of %s succeeded.", w.Before, r.Succeeded, calls)
		r.NotProven = "how the tool behaves when it runs: nothing ran here to race. Either every answer came from a recorded result (a ledger, a cache), or the witness does not see this tool's effect; probe with other arguments, or a fresh ledger, to see it run."
	case r.Succeeded == 1 && r.TransportFailures == 0 && n > 1:
		r.Verdict = NoRaceSurface
		r.Proven = fmt.Sprintf("exactly 1 of %s succeeded; the other %d were refused by the server (%d tool errors, %d protocol errors).",
			calls, n-1, r.ToolErrors, r.ProtocolErrors)
		r.NotProven = "that the server always refuses duplicates: this is one run, under this timing; nor whether a refused call had a partial effect (add --witness)."
	case r.Succeeded == 0:
		r.Verdict = Inconclusive
		r.Proven = fmt.Sprintf("no call succeeded: %d tool errors, %d protocol errors, %d transport failures.", r.ToolErrors, r.ProtocolErrors, r.TransportFailures)
		r.NotProven = "anything about duplicate execution: there was no successful answer to compare."
		if r.DistinctErrors > 1 {
			r.Notes = append(r.Notes, fmt.Sprintf("the tool errors differed (%d distinct): the server handled the call more than once, though it reported a failure each time; whether a failed attempt had an effect is not known (add --witness).", r.DistinctErrors))
		}
	default:
		r.Verdict = Inconclusive
		r.Proven = fmt.Sprintf("%d of %s succeeded, all with the same answer.", r.Succeeded, calls)
		if r.Succeeded == 1 {
			r.Proven = fmt.Sprintf("1 of %s succeeded.", calls)
		}
		if r.ResultNotKept > 0 {
			r.Proven = fmt.Sprintf("%d of %s succeeded: %d with the same answer of the tool, %d with effectfence wrap's notice that an identical call had already run (its result kept only as a hash).",
				r.Succeeded, calls, r.Succeeded-r.ResultNotKept, r.ResultNotKept)
		}
		// A call that got no answer may have run too: "once or 1 times" said nothing of them.
		r.NotProven = fmt.Sprintf("whether the tool ran once or %d times: a tool that runs every time and answers the same way looks exactly like one that ran once. Add a --witness that counts executions (--witness-kind executions).", r.Succeeded+r.TransportFailures)
	}
	switch {
	case w != nil && w.Kind == State && w.Effects == 1:
		r.Notes = append(r.Notes, fmt.Sprintf("the witness reads state and it changed once (%d before, %d after). That does not show the tool ran once: several executions can collapse into one state (an overwrite, a read-modify-write race). Only a witness that counts executions (--witness-kind executions) can show exactly once.", w.Before, w.After))
	case w != nil && w.Kind == State && w.Effects > 1:
		r.Notes = append(r.Notes, fmt.Sprintf("the witness reads state and it moved by %d (%d before, %d after). If each effect adds exactly one unit to it (one row, one entity), that is %d effects: a double-fire. The verdict does not rest on it, because a state reading is not a count of executions (a file's size grows by many bytes for one write); use --witness-kind executions for a witness that counts runs.", w.Effects, w.Before, w.After, w.Effects))
	case w != nil && w.Effects == 0:
		r.Notes = append(r.Notes, fmt.Sprintf("the witness did not move (%d before and after): either the tool has no effect it can see, or it measures something else, or the answers were recorded results (a replay) and nothing ran.", w.Before))
	case w != nil && w.Effects < 0:
		r.Notes = append(r.Notes, fmt.Sprintf("the witness went down (%d before, %d after): something else changed it during the probe.", w.Before, w.After))
	}
	if r.Replayed > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d answer(s) were marked replayed by effectfence wrap (effectfence/replayed in _meta): results recorded earlier, given to duplicates, not new runs of the tool.", r.Replayed))
	}
	if r.ResultNotKept > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d successful answer(s) were effectfence wrap's notice that an identical call had already run and its result was kept only as a hash (--keep-result TOOL=hash): wrap says it did not run those calls again, and the notice is not counted as a distinct answer of the tool.", r.ResultNotKept))
	}
	if r.Pattern == Retry && r.RetriesBeforeAnswer > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d call(s) were sent again before the previous one had answered (it took longer than --retry-after), as an agent retrying after a timeout would.", r.RetriesBeforeAnswer))
	}
	if r.TransportFailures > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d call(s) got no answer (transport failure): whether they executed is unknown.", r.TransportFailures))
	}
	if n := r.NotSent - r.notReached; n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of the %d call(s) were not sent: --timeout passed before their turn.", n, r.Calls))
	}
	if r.notReached > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of the %d call(s) were not sent: the server had already exited or closed its input, so they did not run.", r.notReached, r.Calls))
	}
	r.Headline = r.Verdict.Headline()
}

// JSON is the --json form of the report.
func (r *Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
