// Package probe fires N byte-identical tools/call requests at once at an MCP server and reports,
// honestly, what the answers (and optionally a witness command) prove about double execution.
//
// What it can prove: if identical calls come back with more than one distinct successful answer,
// the server executed the call more than once instead of answering it once (PROVEN DOUBLE-FIRE).
// With a witness (a command that prints a number: rows in a table, lines in a file) it measures
// the effects themselves, which is the strongest evidence. What it cannot prove from answers
// alone: that identical answers mean one execution — a tool that runs twelve times and answers
// "ok" twelve times looks exactly like one that ran once. It never claims a zero it cannot prove.
//
// The probe calls only the named tool, with exactly the given arguments, over one connection.
package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// MaxCalls bounds --calls: a probe is a race of identical calls, not a load test.
const MaxCalls = 10000

// Options describe one probe.
type Options struct {
	Tool    string          // the tool to call
	Args    json.RawMessage // its arguments: a JSON object, sent byte for byte in every call
	Calls   int             // how many identical calls to make
	Witness Witness         // optional: measures effects before and after
	// WitnessKind says what the witness's number is: Executions (one per run of the tool) or
	// State (a reading of the resulting state; the default, because it claims less).
	WitnessKind WitnessKind
	// Pattern is how the calls are sent: Storm (all at once, the default) or Retry (one after
	// another, each sent once the previous one answered or RetryAfter passed).
	Pattern    Pattern
	RetryAfter time.Duration // Retry: how long to wait for an answer before the next call (0: 5 s)
	Timeout    time.Duration // how long to wait for all answers (0: one minute)
	// Answered, if set, is called (from the calling goroutines) each time a call returns.
	Answered func()
}

// Validate checks the options before anything is spawned or called.
func (o Options) Validate() error {
	if strings.TrimSpace(o.Tool) == "" {
		return errors.New("--tool is required: name the tool to call (e.g. --tool charge_card)")
	}
	if o.Calls < 1 {
		return fmt.Errorf("--calls must be at least 1, got %d", o.Calls)
	}
	if o.Calls > MaxCalls {
		return fmt.Errorf("--calls must be at most %d, got %d", MaxCalls, o.Calls)
	}
	if _, err := ParseArgs(string(o.Args)); err != nil {
		return err
	}
	if _, err := ParseWitnessKind(string(o.WitnessKind)); err != nil {
		return err
	}
	if _, err := ParsePattern(string(o.Pattern)); err != nil {
		return err
	}
	if o.RetryAfter < 0 {
		return errors.New("--retry-after must not be negative")
	}
	return nil
}

// ParseArgs checks that s is one JSON object (tools/call arguments are an object) and returns
// it unchanged, so every call sends exactly the bytes the user wrote.
func ParseArgs(s string) (json.RawMessage, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return nil, errors.New("--args is empty: give a JSON object, e.g. --args '{}'")
	}
	if !utf8.ValidString(t) {
		// JSON text is UTF-8 (RFC 8259): a server would read each bad byte as U+FFFD, and the
		// report would show arguments the user did not give.
		return nil, errors.New("--args is not valid UTF-8: JSON text must be UTF-8; write other characters as \\u escapes")
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("--args is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("--args has text after the JSON value")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("--args must be a JSON object (tool arguments are named), got %s", jsonKind(v))
	}
	return json.RawMessage(t), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "something else"
}

// Conn is what a probe needs from one MCP connection; pkg/mcpstdio's client provides it.
type Conn interface {
	// ToolNames lists the server's tools.
	ToolNames(ctx context.Context) ([]string, error)
	// CallTool sends one tools/call and returns the raw JSON result. A JSON-RPC error
	// response is returned as *mcpstdio.RPCError; any other error is a transport failure.
	CallTool(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error)
	// Close shuts the server down.
	Close() error
}

// UnknownToolError: the server has no tool of that name. Nothing was called.
type UnknownToolError struct {
	Tool      string
	Available []string
}

func (e *UnknownToolError) Error() string {
	if len(e.Available) == 0 {
		return fmt.Sprintf("the server has no tool %q (it lists no tools at all); nothing was called", e.Tool)
	}
	// One line a person reads: a server may list thousands of tools, with long names.
	shown := make([]string, 0, min(len(e.Available), maxNamesShown))
	for _, n := range e.Available[:min(len(e.Available), maxNamesShown)] {
		shown = append(shown, clip(n, 100))
	}
	list := strings.Join(shown, ", ")
	if more := len(e.Available) - len(shown); more > 0 {
		list += fmt.Sprintf(", and %d more", more)
	}
	return fmt.Sprintf("the server has no tool %q; it has: %s; nothing was called", clip(e.Tool, 100), list)
}

// maxNamesShown bounds the names UnknownToolError's message lists (Available has them all).
const maxNamesShown = 20

// Dial starts and connects to the server under test.
type Dial func(ctx context.Context) (Conn, error)

// Run validates opts, takes the witness's first reading, connects, checks the tool exists,
// fires opts.Calls identical calls at once over the one connection, closes the connection
// (so the server has finished and flushed), takes the witness's second reading and judges.
//
// Errors before the calls (bad options, witness failure, dial failure, unknown tool) mean
// nothing was called. Once the calls were made, Run always returns the report: a witness that
// fails after them is recorded in Report.WitnessError and the verdict rests on the answers.
func Run(ctx context.Context, opts Options, dial Dial) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	var before int64
	if opts.Witness != nil {
		n, err := opts.Witness.Measure(ctx)
		if err != nil {
			return nil, fmt.Errorf("witness (before the calls): %w; nothing was called", err)
		}
		before = n
	}
	conn, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			conn.Close()
		}
	}()
	// The listing is bounded like the calls: a server that never answers it must not hold
	// the probe past --timeout.
	lctx, cancel := context.WithTimeout(ctx, timeout)
	names, err := conn.ToolNames(lctx)
	cancel()
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, fmt.Errorf("tools/list got no answer within %s; nothing was called", timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("tools/list failed: %w; nothing was called", err)
	}
	if !contains(names, opts.Tool) {
		sort.Strings(names)
		return nil, &UnknownToolError{Tool: opts.Tool, Available: names}
	}

	pattern, _ := ParsePattern(string(opts.Pattern))
	kind, _ := ParseWitnessKind(string(opts.WitnessKind))
	var (
		answers []answer
		early   int
	)
	if pattern == Retry {
		answers, early = fireRetry(ctx, conn, opts, timeout)
	} else {
		answers = fire(ctx, conn, opts, timeout)
	}
	closed = true
	closeErr := conn.Close()

	rep := tally(opts, answers)
	rep.Pattern, rep.RetriesBeforeAnswer = pattern, early
	if closeErr != nil {
		rep.Notes = append(rep.Notes, "the server did not shut down cleanly: "+closeErr.Error())
	}
	if opts.Witness != nil {
		// The calls were made: a witness that fails now must not cost the report, whose
		// answers may already prove a double-fire. The verdict then rests on them alone.
		after, err := opts.Witness.Measure(ctx)
		if err != nil {
			rep.WitnessError = fmt.Sprintf("witness (after the calls): %v", err)
			rep.Notes = append(rep.Notes, fmt.Sprintf("the witness read %d before the calls but failed after them, so the verdict rests on the answers alone: %s", before, rep.WitnessError))
		} else {
			rep.Witness = &WitnessReport{Command: opts.Witness.String(), Kind: kind, Before: before, After: after, Effects: after - before}
		}
	}
	rep.judge()
	return rep, nil
}

func contains(names []string, s string) bool {
	for _, n := range names {
		if n == s {
			return true
		}
	}
	return false
}

// answer is what one call got back: a result or an error.
type answer struct {
	result json.RawMessage
	err    error
}

// fire sends opts.Calls identical calls at once: every goroutine is started and parked first,
// then released together, so the calls overlap as closely as one connection allows.
func fire(ctx context.Context, conn Conn, opts Options, timeout time.Duration) []answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]answer, opts.Calls)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(opts.Calls)
	done.Add(opts.Calls)
	for i := range out {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			res, err := conn.CallTool(ctx, opts.Tool, opts.Args)
			out[i] = answer{res, timedOut(err, timeout)}
			if opts.Answered != nil {
				opts.Answered()
			}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return out
}
