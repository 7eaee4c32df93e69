// Package wrap is the MCP proxy of `effectfence wrap`: it stands between an agent and a real
// MCP stdio server (the child) and lets each distinct side-effecting tool call run at most
// once.
//
// Guarantees, for tools/call of a fenced tool:
//   - Identical calls (same tool, same canonical arguments after --ignore-field) are one
//     intent, `wrap:<tool>:<sha256 of JCS {tool, args}>`. At most one attempt of an intent is
//     forwarded to the child at a time, across every wrap process that shares the ledger.
//     Concurrent duplicates wait for it (up to Options.Wait) and receive its result; later
//     duplicates receive the recorded result (a replay, marked in _meta) without running.
//   - A result with isError true, a JSON-RPC error from the child and a request that never
//     reached the child are definite failures: the intent is released (a retry may run) and
//     the duplicates that waited in this process receive the same failure. The ledger records
//     no failure, so a duplicate waiting in another process finds the intent free and runs it.
//   - A child that dies, or a transport that fails, after the call was written leaves the
//     outcome unknown: the intent is fenced until an operator clears it, and every duplicate
//     is told it was not executed again and what the operator must run.
//
// Everything else (tools/list, resources, prompts, completion, logging, notifications both
// ways, the child's requests to the agent) passes through unfenced, byte for byte. What the
// child writes reaches the agent in the child's order (a progress notification written
// before a result arrives before it; see mcpstdio's package comment for requests).
package wrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/budget"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Defaults of the options.
const (
	DefaultWait          = 30 * time.Second
	DefaultMaxConcurrent = 64
	// DefaultGrace is how long a stopping wrap lets calls in flight finish. MCP clients close
	// stdin, send SIGTERM about 2 s later and SIGKILL about 2 s after that; a 2 s grace leaves
	// the time to stop the MCP server and record what it still held before the SIGKILL.
	DefaultGrace = 2 * time.Second
	// childStopBudget is how long a stopping wrap gives the MCP server to exit after the grace
	// (half after closing its stdin, half after SIGTERM) before SIGKILL.
	childStopBudget = time.Second
	// MaxMessage bounds one message from the agent (64 MiB).
	MaxMessage = 64 << 20
	// RequestBudget bounds the bytes of large messages from the agent that Serve (the stdio
	// front) holds at once: a line that grows past FreeMessage first reserves MaxMessage,
	// cut to its length once it has ended, and keeps it until it is served (a request: until
	// its answer is written; an answer to the server's request: until it is passed on; any
	// other message: until it is handled). While there is no room the agent's input is not
	// read further (back-pressure on the pipe); a line that finds none within a minute is
	// skipped unread and, a request, answered that it was NOT executed. Eight 60 MiB calls at
	// once took wrap to several GiB without it (docs/DECISIONS-wrap.md).
	RequestBudget = 128 << 20
	// FreeMessage is how long a message may be without reserving any of a budget.
	FreeMessage = 1 << 20
)

// requests is the process's RequestBudget, requestWait how long a line waits for room in it
// (variables so tests can lower them).
var (
	requests    = budget.NewPool(RequestBudget)
	requestWait = time.Minute
)

// Options configure a Proxy.
type Options struct {
	// Command is the child MCP server's argv: the stdio back. Required unless Backend is set.
	Command []string
	// Backend, when set, is the back used instead of running Command (an upstream over
	// Streamable HTTP, say); one Backend is made per Proxy.
	Backend Dial
	// Env is added to the child's environment.
	Env []string
	// Scope is the id of the server's scope (store.WrapScope): part of every call's identity,
	// so two servers or accounts sharing a ledger never share a receipt.
	Scope string
	// Engine is the fence over the ledger. Required.
	Engine *fence.Engine
	// ClearHint is how an operator names this ledger to `effectfence ledger clear`, e.g.
	// "--ledger /path/to.db": it is put in the messages of fenced calls, so it must hold from
	// wherever the operator runs it (an absolute path, not "--for", which depends on the
	// operator's directory and environment).
	ClearHint string
	// InMemory says the ledger lives in this process's memory: no `effectfence ledger`
	// command can reach it, so fenced calls say that instead of a command to run.
	InMemory bool
	// Wait bounds how long a duplicate waits for the attempt in flight (default DefaultWait).
	Wait time.Duration
	// FenceReads fences tools annotated readOnlyHint too.
	FenceReads bool
	// Fence and Pass force tools in or out of the fence (Pass wins).
	Fence, Pass []string
	// Ignore removes fields from a tool's identity; Key names a tool's identity fields. A key
	// field that is ignored, or lies under an ignored field, is refused (New): ignored fields
	// are cut before the key is read, so distinct calls would be one.
	Ignore map[string][]Path
	Key    map[string][]Path
	// NoInjectKey turns off filling an empty idempotency-key-like argument.
	NoInjectKey bool
	// RerunSafe lists tools whose calls may run a second time without harm (the downstream
	// honours the injected idempotency key, say). Their claims are recorded re-run safe, so a
	// claim whose lease lapsed with its holder out of sight, or whose holder died, is taken
	// over; any other tool's becomes unknown (see docs/RELIABILITY.md).
	RerunSafe []string
	// SettleWait bounds how long a call's outcome is retried against a ledger that does not
	// answer before it is left in the engine's spool (default: the lease TTL).
	SettleWait time.Duration
	// Redact names, per tool, argument fields the ledger stores as [redacted] (identity still
	// uses them); KeepResult says, per tool, whether the ledger keeps results or only their
	// SHA-256 (privacy.go).
	Redact     map[string][]string
	KeepResult map[string]fence.KeepResult
	// ReplayWindow is how long a recorded result answers an identical call (default
	// DefaultReplayWindow); ReplayWindows sets it per tool. A later identical call is a new
	// action. The done record and its audit stay for the ledger's result TTL either way. 0 is
	// the default; anything else must be from MinReplayWindow to MaxReplayWindow (New).
	ReplayWindow  time.Duration
	ReplayWindows map[string]time.Duration
	// NoElicit names tools about whose unknown outcomes no person may be asked through MCP
	// elicitation (only an operator decides).
	NoElicit map[string]bool
	// PerTool, when set, gives each tool's settings in place of Fence, Pass, Key, Ignore,
	// RerunSafe, Redact, KeepResult, ReplayWindows and NoElicit, and may shorten or lengthen
	// Wait for the tool's calls: a policy file names tools by globs, which match only the
	// names the server lists at run time (pkg/policy builds it with the flags folded in).
	// Settings it gives whose key field is ignored refuse the tool's calls (not run).
	PerTool func(tool string) ToolSettings
	// Named lists tool names that PerTool's settings spell exactly (a policy file's entries
	// that are not globs), with where each is written. They and the per-tool options' names
	// are checked against the server's listing: one it does not list is logged once (a
	// misspelt name's settings, a redaction say, apply to no call).
	Named []NamedTool
	// MaxConcurrent bounds the requests forwarded to the child at once (default
	// DefaultMaxConcurrent). Duplicates waiting for an attempt in flight, pings, replays and
	// tasks/result (which waits for its task to end) take no slot, so they never queue behind
	// slow calls nor hold one back.
	MaxConcurrent int
	// InitTimeout bounds the child's answer to initialize (default mcpstdio's).
	InitTimeout time.Duration
	// Grace bounds how long Serve, once the agent's input ends or ctx is cancelled, waits for
	// calls in flight (default DefaultGrace). Then it stops the child: each fenced call still
	// inside it is recorded as unknown (fenced until an operator clears it), and duplicates
	// still waiting for another process's attempt are answered "not executed".
	Grace time.Duration
	// Log receives diagnostics and, without ServerStderr, the child's stderr. Required.
	Log io.Writer
	// ServerStderr, when set, receives the child's stderr instead of Log, so a log can tell
	// the server's lines from effectfence's by who wrote them (--log-format json).
	ServerStderr io.Writer
	// Shared, when set, is shared by the proxies of one front (the sessions of an HTTP
	// listener): a duplicate in one session joins an attempt running in another. Nil: this
	// proxy's own.
	Shared *Shared
	// Observe, when set, is told the outcome of every tools/call (for metrics).
	Observe func(CallEvent)
	// ElicitWait bounds the wait for a person's answer about an unknown outcome (default
	// DefaultElicitWait; Options.NoElicit forbids asking). See elicit.go.
	ElicitWait time.Duration
	// OnUnknown, if set, is told of every intent that becomes unknown in this process
	// (hook.go).
	OnUnknown *Hook
}

// Shared is what the sessions of one front share (see Options.Shared).
type Shared struct {
	flights   flights
	unapplied said
	misnamed  said // names settings spell that the server does not list, once logged (named)
}

// NewShared returns an empty Shared.
func NewShared() *Shared { return &Shared{flights: flights{m: map[flightKey]*flight{}}} }

// said is the set of read-only tools whose own settings wrap said have no effect (fenced), so
// each is named once per process, not once per session of a front. Only listed tools enter
// it, and at most maxTools of them.
type said struct {
	m sync.Map
	n atomic.Int64
}

// first reports whether name is new to the set, adding it.
func (s *said) first(name string) bool {
	if _, ok := s.m.Load(name); ok || s.n.Load() >= maxTools {
		return false
	}
	if _, ok := s.m.LoadOrStore(name, true); ok {
		return false
	}
	s.n.Add(1)
	return true
}

// Abandon ends the waits of duplicates waiting in any session for an attempt of another
// process: for a front that stops and gives up on its calls in flight.
func (s *Shared) Abandon() { s.flights.cancelAll() }

// CallEvent is one tools/call answered, for Options.Observe.
type CallEvent struct {
	Tool string
	// Outcome: "passed" (not fenced, forwarded), "executed" (fenced, ran here: Code says how
	// it ended, "" for success), "replayed" (a recorded result), "coalesced" (the answer of an
	// attempt this call waited for), "refused" (not run: Code is the refusal's code; a
	// duplicate its agent cancelled while it waited is intent_in_flight, and unanswered),
	// "unknown" (ran here, outcome unknown), "invalid" (params refused). A task-augmented
	// duplicate answered with a working task that follows the attempt in flight is
	// "coalesced", code task_following (its follower's last answer is what the ledger counts).
	Outcome string
	Code    string
	Elapsed time.Duration
}

// Proxy is one wrap session between one agent and its child.
type Proxy struct {
	opt   Options
	out   Sink
	fence map[string]bool
	pass  map[string]bool
	rerun map[string]bool // Options.RerunSafe

	carried carried // the carrier of the server process calls go to (carrier.go)

	mu       sync.Mutex
	child    Backend
	agent    string
	initDone bool
	// startErr is why the last start of the child failed (nil once one succeeds), so later
	// requests say what failed rather than that initialize was never sent.
	startErr string
	// initGate is closed when an initialize the reader has seen has registered its child (or
	// failed before it could): requests read after that initialize wait for it instead of
	// being told that initialize was never sent, since they run on their own goroutines and
	// may otherwise overtake it.
	initGate chan struct{}

	tools   toolCache
	named   named
	local   localTasks // tasks effectfence answers itself (tasks.go)
	flights *flights
	elicit  elicitState // elicit.go
	hooks   *hookRunner // hook.go; nil without Options.OnUnknown
	sem     chan struct{}
	calls   sync.WaitGroup
	// idle hands a request to a worker goroutine waiting for one (see serveRequest).
	idle chan func()

	nextID    atomic.Int64
	pmu       sync.Mutex
	pending   map[string]chan agentAnswer
	agentGone chan struct{}   // closed when the agent's input ends
	graceOver context.Context // ended when a stop's grace is over: outcomes still settling go to the spool at once
	endGrace  context.CancelFunc
	stopOnce  sync.Once
	smu       sync.Mutex
	stopped   bool   // Stop has begun (guarded by smu)
	stopWhy   string // why, once stopped (guarded by smu)
	// ownFlights: the flights are this proxy's alone (no Options.Shared), so a stop that
	// gives up on the calls in flight ends every wait in them.
	ownFlights bool
	// unapplied: the read-only tools whose own settings wrap said have no effect (fenced); the
	// front's when Options.Shared is set.
	unapplied *said

	cmu     sync.Mutex
	cancels map[string]cancelEntry // by the agent's request id
	nextReq uint64                 // numbers the entries of cancels (guarded by cmu)

	rmu      sync.Mutex
	running  map[int64]running // requests of the agent being served, for the shutdown log
	nextSlot int64
	// readers counts the requests among running that only wait for a task of wrap's own to end
	// (tasks/result of a task that follows an attempt: localTask); guarded by rmu.
	readers int

	// tasks counts the tasks whose final result wrap awaits (see runTask).
	tasks atomic.Int64

	// requests and requestWait are RequestBudget and how long a line waits for room in it, as
	// they were when the proxy was made.
	requests    *budget.Pool
	requestWait time.Duration
}

// running is a request of the agent being served.
type running struct {
	method, id string
	since      time.Time
	// params of a tools/call, whose tool is named in String: decoded only for the log
	// line, not on every call.
	params json.RawMessage
}

func (r running) String() string {
	what := r.method
	var cp struct {
		Name string `json:"name"`
	}
	if r.params != nil && json.Unmarshal(r.params, &cp) == nil {
		what += " " + strconv.Quote(cp.Name)
	}
	return fmt.Sprintf("%s (request id %s, running %s)", what, jsonrpc.LogID([]byte(r.id)), time.Since(r.since).Round(100*time.Millisecond))
}

// New checks opt and returns a Proxy. It refuses what the command refuses at its start: no
// server, no engine or log, a bad OnUnknown hook, and per-tool settings that would fence
// wrongly or fail every call (a key field that is ignored, an empty field path, a replay
// window out of range, a bad redact path, a KeepResult other than full or hash).
func New(opt Options) (*Proxy, error) {
	if opt.Backend == nil && (len(opt.Command) == 0 || opt.Command[0] == "") {
		return nil, errors.New("wrap: no MCP server command given (effectfence wrap [flags] -- <command...>)")
	}
	if opt.Engine == nil || opt.Log == nil {
		return nil, errors.New("wrap: an engine and a log writer are required")
	}
	if opt.Wait <= 0 {
		opt.Wait = DefaultWait
	}
	if opt.MaxConcurrent <= 0 {
		opt.MaxConcurrent = DefaultMaxConcurrent
	}
	if opt.Grace <= 0 {
		opt.Grace = DefaultGrace
	}
	if opt.Backend == nil {
		opt.Backend = Stdio(opt.Command, opt.Env)
	}
	p := &Proxy{opt: opt, fence: set(opt.Fence), pass: set(opt.Pass), rerun: set(opt.RerunSafe), sem: make(chan struct{}, opt.MaxConcurrent), pending: map[string]chan agentAnswer{}, agentGone: make(chan struct{}), cancels: map[string]cancelEntry{}, running: map[int64]running{}, idle: make(chan func()), requests: requests, requestWait: requestWait}
	p.graceOver, p.endGrace = context.WithCancel(context.Background())
	if opt.Shared == nil {
		p.flights, p.ownFlights = newFlights(), true
		p.unapplied = &said{}
		p.named.told = &said{}
	} else {
		p.flights = &opt.Shared.flights
		p.unapplied = &opt.Shared.unapplied
		p.named.told = &opt.Shared.misnamed
	}
	p.named.tools = namedTools(opt)
	if len(p.named.tools) > 0 {
		p.tools.whole = func(all map[string]toolInfo) { p.named.listed(all, p.logf) }
	}
	if err := opt.OnUnknown.Check(); err != nil {
		return nil, fmt.Errorf("wrap: %w", err)
	}
	if err := checkToolOptions(opt); err != nil {
		return nil, fmt.Errorf("wrap: %w", err)
	}
	if opt.OnUnknown != nil {
		p.hooks = newHookRunner(p, *opt.OnUnknown)
	}
	return p, nil
}

// checkToolOptions refuses per-tool options that the command's flags and a policy file could
// not give either: a key field cut by an ignored one (distinct calls would be one, the second
// answered with the first's receipt), an empty field path, a replay window out of range (600
// meant as seconds is 600 ns: every retry would run again), and privacy settings the engine
// would refuse at every call of the tool. Options.PerTool is checked at each call instead
// (toolsCallAs): its tools are known only then.
func checkToolOptions(opt Options) error {
	if err := checkWindow(opt.ReplayWindow); err != nil {
		return err
	}
	tools := map[string]bool{}
	for tool := range opt.Key {
		tools[tool] = true
	}
	for tool := range opt.Ignore {
		tools[tool] = true
	}
	for tool := range opt.Redact {
		tools[tool] = true
	}
	for tool := range opt.KeepResult {
		tools[tool] = true
	}
	for tool := range opt.ReplayWindows {
		tools[tool] = true
	}
	names := make([]string, 0, len(tools))
	for tool := range tools {
		names = append(names, tool)
	}
	sort.Strings(names) // the same error for the same options
	for _, tool := range names {
		s := ToolSettings{Key: opt.Key[tool], Ignore: opt.Ignore[tool], Redact: opt.Redact[tool], KeepResult: opt.KeepResult[tool], ReplayWindow: opt.ReplayWindows[tool]}
		if err := s.check(); err != nil {
			return fmt.Errorf("tool %q: %w", tool, err)
		}
	}
	return nil
}

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// logf writes one line to the log. Its arguments can quote the agent or the server, so the
// line is escaped: it stays one line and cannot drive a terminal.
func (p *Proxy) logf(format string, a ...any) {
	fmt.Fprintln(p.opt.Log, "effectfence wrap: "+safetext.Escape(fmt.Sprintf(format, a...)))
}

// Serve reads the agent's messages from in and writes protocol to out until in ends or ctx is
// cancelled. It then stops (see Options.Grace): it waits up to the grace for calls in flight,
// logging what it waits for, then stops the child; each fenced call still inside the child is
// recorded as unknown. Kill ends everything at once instead.
func (p *Proxy) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	if in == nil || out == nil {
		return errors.New("wrap: Serve needs an input and an output (the agent's stdin and stdout)")
	}
	p.Attach(jsonrpc.NewWriter(out))
	readErr := make(chan error, 1)
	// The reader dispatches each message itself, in the order read. A request is then served
	// by the goroutine that read it, which first hands the reading on to an idle worker (or a
	// new goroutine): the request starts at once, and waking the next reader (a thread wake-up,
	// expensive on a virtual machine) happens beside it rather than before it.
	r := jsonrpc.NewReader(in, MaxMessage)
	r.Meter(ctx, p.requests, FreeMessage, p.requestWait)
	var read func()
	read = func() {
		for {
			line, err := r.ReadLine()
			if err == jsonrpc.ErrTooLong || err == jsonrpc.ErrNoRoom {
				p.skipped(r, err)
				continue
			}
			if err == nil && ctx.Err() != nil {
				p.requests.Release(r.Held())
				err = ctx.Err()
			}
			if err != nil {
				readErr <- err
				return
			}
			if run := p.route(line, true, r.Held()); run != nil {
				p.serveRequest(read) // the next message is read on another goroutine
				run()
				return
			}
		}
	}
	go p.worker(read)
	var err error
	select {
	case err = <-readErr:
	case <-ctx.Done():
		err = ctx.Err()
	}
	why := "the agent closed its input"
	switch {
	case errors.Is(err, context.Canceled):
		why, err = "asked to stop", nil
	case errors.Is(err, io.EOF):
		err = nil
	case err != nil:
		why = fmt.Sprintf("reading from the agent failed (%v)", err)
	}
	p.Stop(why)
	return err
}

// skipped answers for a line of the agent's that the reader skipped unread (err is
// jsonrpc.ErrTooLong or jsonrpc.ErrNoRoom). A request is answered under its id (read as the
// line went by), so the agent's call ends now rather than at its own timeout: it never reached
// the fence, nothing ran. An answer to a request of the server's is given to that request as
// an error, so the server is not left waiting for it.
func (p *Proxy) skipped(r *jsonrpc.Reader, err error) {
	why := fmt.Sprintf("message longer than %d bytes refused", MaxMessage)
	if err == jsonrpc.ErrNoRoom {
		why = fmt.Sprintf("effectfence wrap: the large messages this process holds filled its memory budget (%d MiB) and none ended within %s, so this message was skipped unread: it was NOT executed; send it again", p.requests.Total()>>20, p.requestWait)
	}
	if id := r.SkippedRequestID(); id != nil || r.SkippedID() == nil {
		code := jsonrpc.CodeInvalidRequest
		if err == jsonrpc.ErrNoRoom {
			code = jsonrpc.CodeInternalError
		}
		p.reply(jsonrpc.ErrorResponse(id, &jsonrpc.Error{Code: code, Message: why}))
		return
	}
	p.logf("the agent's answer to request %s was skipped unread (%s); the MCP server is told", jsonrpc.LogID(r.SkippedID()), why)
	p.answered(&jsonrpc.Message{ID: r.SkippedID(), Error: rpcErr(jsonrpc.CodeInternalError, "effectfence: the client's answer was skipped unread: %s", why)}, 0)
}

// agentAnswer is the agent's answer to a request of the server's (childRequest), with the
// room its line holds of the request budget.
type agentAnswer struct {
	m    *jsonrpc.Message
	held int64
}

// awaited reports whether a request of the server's passed on to the agent under id waits for
// its answer.
func (p *Proxy) awaited(id json.RawMessage) bool {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	_, ok := p.pending[jsonrpc.IDKey(id)]
	return ok
}

// answered hands the agent's answer m to the request of the server's waiting for it, with the
// room of the request budget it holds (given back here when none waits).
func (p *Proxy) answered(m *jsonrpc.Message, held int64) {
	p.pmu.Lock()
	key := jsonrpc.IDKey(m.ID) // the agent's JSON library may spell our id otherwise
	ch := p.pending[key]
	delete(p.pending, key)
	p.pmu.Unlock()
	if ch == nil {
		p.requests.Release(held)
		p.logf("the agent answered request id %s that is not waiting; ignored", jsonrpc.LogID(m.ID))
		return
	}
	ch <- agentAnswer{m, held}
}

// Sink receives what the proxy sends to the agent of its session, one JSON-RPC message per
// call: responses, the server's notifications and requests. A front frames them (a line on
// stdout, a JSON body or an SSE event over HTTP). Write is called from many goroutines, one
// message at a time per call; it must not block for long.
type Sink interface {
	Write(line []byte) error
}

// The front's side of a Proxy: Attach once, then Dispatch each message of the agent, then
// Stop once. Serve is the stdio front built from them.

// Attach sets where the proxy writes to the agent. It must be called before Dispatch.
func (p *Proxy) Attach(out Sink) { p.out = out }

// Dispatch handles one message of the agent (a request, a response or a notification): a
// request runs on its own goroutine and its answer goes to the Sink. Before Attach, it drops
// the message unread (nothing runs) and says so in the log.
func (p *Proxy) Dispatch(line []byte) {
	if p.out == nil {
		// Nobody would hear the answer: running a call now would be an effect no agent learns
		// of. Refused unread instead, and said where a person reads it.
		p.logf("a message of the agent was dropped unread (nothing ran): Dispatch was called before Attach")
		return
	}
	if run := p.route(line, false, 0); run != nil {
		p.serveRequest(run)
	}
}

// Stop ends the session (why is for the log): requests of the server to the agent can no
// longer be answered; calls in flight get the grace, then the back is closed and what it
// still held is recorded as unknown.
func (p *Proxy) Stop(why string) {
	p.stopOnce.Do(func() {
		p.smu.Lock()
		p.stopped = true // no request starts after this: drain's Wait sees them all
		p.stopWhy = why
		p.smu.Unlock()
		close(p.agentGone)
		p.drain(why)
	})
}

// stopReason is why the proxy was stopped ("" before Stop).
func (p *Proxy) stopReason() string {
	p.smu.Lock()
	defer p.smu.Unlock()
	return p.stopWhy
}

// drain waits up to the grace for running calls, then closes the child, which fails what is
// still inside it (recorded as unknown by run), and ends the waits of duplicates.
func (p *Proxy) drain(why string) {
	done := make(chan struct{})
	go func() { p.calls.Wait(); close(done) }()
	if calls := p.inFlight(); len(calls) > 0 {
		p.logf("stopping (%s): waiting up to %s for %s: %s", why, p.opt.Grace, plural(len(calls), "call"), strings.Join(calls, "; "))
	}
	timer := time.NewTimer(p.opt.Grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		p.endGrace()
		calls := p.inFlight()
		if len(calls) == 0 {
			// The last call ended as the grace did (a duplicate answered at the stop, say).
			p.logf("grace of %s is over; stopping the MCP server (no call is still running)", p.opt.Grace)
		} else {
			p.logf("grace of %s is over; stopping the MCP server with %s still running: %s. A fenced call still inside it is recorded as unknown and fenced until an operator clears it; a duplicate still waiting is answered that it was not executed", p.opt.Grace, plural(len(calls), "call"), strings.Join(calls, "; "))
		}
		if p.ownFlights {
			p.flights.cancelAll() // duplicates waiting for an attempt of another process stop waiting
		}
	}
	p.mu.Lock()
	c := p.child
	p.mu.Unlock()
	if c != nil {
		_ = c.CloseWithin(childStopBudget)
	}
	p.tools.shutdown() // no list_changed can come any more: end the refresh goroutine
	<-done
	if p.hooks != nil {
		p.hooks.close(p.opt.Grace) // events still queued get the grace, then are dropped
	}
}

// Kill stops the child at once (SIGKILL to its process group) and fails what is inside it,
// without waiting for anything: for a wrap that must exit now. Calls in flight keep their
// claims; the next process that meets one sees its holder gone and fences it as unknown.
func (p *Proxy) Kill() {
	p.mu.Lock()
	c := p.child
	p.mu.Unlock()
	if c != nil {
		_ = c.Kill()
	}
}

// InFlight describes the agent's requests being served, for a log line.
func (p *Proxy) InFlight() []string { return p.inFlight() }

// Serving is how many of the agent's requests are being served, a fenced call whose agent
// went away included, plus the tasks whose final result wrap awaits. A front must not close
// a session as idle while it serves any: that would stop the server in the middle of the call
// (or task) and leave its outcome unknown.
//
// A task of wrap's own that follows another call's attempt (followFlight) is not counted, nor
// is a tasks/result waiting for one to end: they hold nothing in the server, and the attempt
// they follow records its outcome wherever it runs, which a retry is handed. So a session whose
// agent went away (killed, without a DELETE) idles out as any, its follower stopping with it.
// Before 2026-12-07 they were counted, and such a session stayed open, a place under
// --max-sessions, until the attempt ended, whatever became of its agent: agents that crashed
// while their tasks followed took every place (TestKilledFollowingClientsFreeTheirSessions).
func (p *Proxy) Serving() int {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	return len(p.running) - p.readers + int(p.tasks.Load())
}

// reading marks one request being served as a wait for a task of wrap's own (see Serving)
// until the returned function is called.
func (p *Proxy) reading() func() {
	p.rmu.Lock()
	p.readers++
	p.rmu.Unlock()
	return func() {
		p.rmu.Lock()
		p.readers--
		p.rmu.Unlock()
	}
}

// StartFailed reports whether the server failed to start at the agent's last initialize and
// none has succeeded since: the session holds no server, only the reason.
func (p *Proxy) StartFailed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.initDone && p.child == nil && p.startErr != ""
}

func (p *Proxy) inFlight() []string {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	rs := make([]running, 0, len(p.running))
	for _, r := range p.running {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].since.Before(rs[j].since) })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// track records a request being served until the returned function is called (once or more).
func (p *Proxy) track(m *jsonrpc.Message) func() {
	r := running{method: m.Method, id: string(m.ID), since: time.Now()}
	if m.Method == "tools/call" {
		r.params = m.Params
	}
	p.rmu.Lock()
	p.nextSlot++
	slot := p.nextSlot
	p.running[slot] = r
	p.rmu.Unlock()
	return func() {
		p.rmu.Lock()
		delete(p.running, slot)
		p.rmu.Unlock()
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func (p *Proxy) reply(line []byte) {
	if line == nil {
		return
	}
	if err := p.out.Write(line); err != nil {
		p.logf("cannot write to the agent: %v", err)
	}
}

func rpcErr(code int, format string, a ...any) *jsonrpc.Error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// route handles one message from the agent: responses and notifications at once, so an
// answer the child is waiting for never queues behind busy requests. For a request it
// returns the function that serves it, which the caller runs on a goroutine of its own
// (what requests forward to the child is bounded by the semaphore); else nil. owned: the
// line is the caller's to give (the message may share its bytes). held is the room of the
// request budget the line holds (Serve's reader): route gives it back once the message is
// handled (a request's once run has served it; an answer's once the server's request is done
// with it).
func (p *Proxy) route(line []byte, owned bool, held int64) (run func()) {
	parse := jsonrpc.Parse
	if owned {
		parse = jsonrpc.ParseOwned
	}
	m, err := parse(line)
	kept := false // held is handed on
	defer func() {
		if !kept {
			p.requests.Release(held)
		}
	}()
	if err != nil {
		if id := jsonrpc.AnswerID(line); id != nil && p.awaited(id) {
			// The agent answered a request of the server's, but not with a valid response
			// (a result beside an error, another "jsonrpc"): the request is answered with an
			// error, as mcpstdio does for the server's such answers, rather than left waiting
			// while the agent is sent an error under the server's request's id, which names
			// no request of the agent's.
			kept = true
			p.logf("the agent's answer to request %s is not a valid JSON-RPC response (%v); the MCP server is told", jsonrpc.LogID(id), err)
			p.answered(&jsonrpc.Message{ID: id, Error: rpcErr(jsonrpc.CodeInternalError, "effectfence: the client's answer is not a valid JSON-RPC response: %v", err)}, held)
			return nil
		}
		// Invalid JSON is a parse error with id null. Valid JSON that is not a valid message
		// is an invalid request, answered with its id when it had a readable one, so the
		// agent's request does not wait for an answer that never comes.
		code := jsonrpc.CodeInvalidRequest
		if !json.Valid(line) {
			code = jsonrpc.CodeParseError
		}
		p.reply(jsonrpc.ErrorResponse(jsonrpc.ReadableID(line), rpcErr(code, "effectfence wrap: cannot parse the message: %v", err)))
		return nil
	}
	switch {
	case m.IsResponse():
		kept = true
		p.answered(m, held)
	case m.IsNotification():
		p.notify(m)
	case m.IsRequest():
		if m.Method == "initialize" {
			p.mu.Lock()
			if p.initGate == nil && p.child == nil && !p.initDone {
				p.initGate = make(chan struct{})
			}
			p.mu.Unlock()
		} else if v, unspoken := UnspokenRevision(m.Params); unspoken && p.uninitialized() {
			// A client of stateless MCP (2026-07-28) sends no initialize: told which
			// revisions wrap speaks, one that speaks an earlier one too sends initialize
			// (MCP's TypeScript SDK 2 does), where before it was told that the server was
			// not running, which a client speaking only 2026-07-28 reported as "no modern
			// evidence", never naming what wrap speaks.
			p.reply(RevisionError(m.ID, v))
			return nil
		}
		p.smu.Lock()
		if p.stopped {
			p.smu.Unlock()
			p.reply(jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInternalError, "effectfence wrap: the session is stopping; the request was NOT executed")))
			return nil
		}
		p.calls.Add(1) // before Stop's Wait: see stopped
		p.smu.Unlock()
		// The request's cancellation is known before the next message is handled: a
		// notifications/cancelled that follows it must find it, however soon it comes. It is
		// known before the request is listed in InFlight, too.
		ctx, cancel := context.WithCancelCause(context.Background())
		key := jsonrpc.IDKey(m.ID) // a cancellation may spell the id otherwise ("\u0071" for "q")
		p.cmu.Lock()
		p.nextReq++
		entry := cancelEntry{cancel, p.nextReq}
		p.cancels[key] = entry
		p.cmu.Unlock()
		untrack := p.track(m)
		kept = true
		return func() {
			defer p.calls.Done()
			defer untrack()
			defer p.requests.Release(held)
			p.request(ctx, entry, key, m, untrack)
		}
	default:
		p.reply(jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidRequest, "effectfence wrap: not a request, response or notification")))
	}
	return nil
}

// workerIdle is how long a worker goroutine waits for another request before it ends.
const workerIdle = 10 * time.Second

// serveRequest runs f, one request of the agent, on a goroutine of its own: a worker that is
// idle, or a new one when none is (never queued behind another request). A worker keeps the
// stack that decoding, the fence and the ledger grew on earlier requests, where a fresh
// goroutine per request grew one again every time (runtime.copystack was about a tenth of
// wrap's CPU per call). Workers end after workerIdle without work, or when the agent is gone.
func (p *Proxy) serveRequest(f func()) {
	select {
	case p.idle <- f:
	default:
		go p.worker(f)
	}
}

func (p *Proxy) worker(f func()) {
	timer := time.NewTimer(workerIdle)
	defer timer.Stop()
	for {
		f()
		f = nil // let what the request held be collected while this worker waits
		timer.Reset(workerIdle)
		select {
		case f = <-p.idle:
		case <-timer.C:
			return
		case <-p.agentGone:
			return
		}
	}
}

func (p *Proxy) notify(m *jsonrpc.Message) {
	switch m.Method {
	case "notifications/initialized":
		return // sent to the child by the handshake already
	case "tools/call":
		// A call without an id cannot be answered, so it can be neither fenced (no duplicate
		// could learn its outcome) nor reported; a server faithful to JSON-RPC would run it
		// every time. It is not forwarded.
		p.logf("a tools/call without an id (a notification) was NOT forwarded: give it an id")
		return
	case "notifications/cancelled":
		// Forwarded for pass-through requests only: a fenced tool call is detached from the
		// agent's cancellation on purpose (an agent that gives up must not abort a charge
		// half way). Session.Call tells the child when its context is cancelled.
		// The agent's reason is passed on as it was given (none when it gave none).
		// A fenced call not forwarded yet is not detached: waiting for a slot it is not sent
		// (run), and a duplicate waiting for another attempt stops waiting (fencedCall);
		// neither is answered.
		// The notification is read as MCP's SDKs read it: the request is named by "requestId"
		// spelled so, never "RequestId" (jsonrpc.Cancelled), and a reason that is not a string
		// makes a notification they refuse, which cancels nothing (the TypeScript SDK's server
		// runs and answers the request; before 2026-12-07 wrap cancelled it, dropping the reason).
		if requestID, reason, ok := jsonrpc.Cancelled(m.Params); ok {
			why := mcpstdio.CancelReason{Reason: reason}
			p.cmu.Lock()
			cancel := p.cancels[jsonrpc.IDKey(requestID)].cancel
			p.cmu.Unlock()
			if cancel != nil {
				cancel(&why)
			}
		}
		return
	}
	s := p.live()
	if s == nil {
		return
	}
	if err := s.Notify(m.Method, m.Params); err != nil {
		p.logf("cannot forward %s to the MCP server: %v", m.Method, err)
	}
}

// uninitialized reports whether the agent has sent no initialize yet (none in progress, none
// done, none that failed).
func (p *Proxy) uninitialized() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.initGate == nil && p.child == nil && !p.initDone && p.startErr == ""
}

// live returns the current session without starting one.
func (p *Proxy) live() Conn {
	p.mu.Lock()
	c := p.child
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Current()
}

// session returns a live session, restarting a dead child.
func (p *Proxy) session(ctx context.Context) (Conn, error) {
	p.mu.Lock()
	c, gate := p.child, p.initGate
	p.mu.Unlock()
	if c == nil && gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, ctx.Err())
		}
		p.mu.Lock()
		c = p.child
		p.mu.Unlock()
	}
	if c == nil {
		p.mu.Lock()
		why := p.startErr
		p.mu.Unlock()
		if why != "" {
			return nil, fmt.Errorf("%w: it did not start: %s (send initialize again to retry)", mcpstdio.ErrNotSent, why)
		}
		return nil, fmt.Errorf("%w: the agent has not sent initialize yet", mcpstdio.ErrNotSent)
	}
	return c.Session(ctx)
}

// cancelEntry is a request's cancellation, numbered so that a request removes its own entry
// only: an agent may send a request under the id of one still being served (ids are its to
// choose), and the second's entry must outlive the first.
type cancelEntry struct {
	cancel context.CancelCauseFunc
	n      uint64
}

// request serves m in ctx, which route registered under key in cancels (for the agent's
// notifications/cancelled) and this removes once m is served, unless a later request under
// the same id has taken the entry. answered (track's) is called before the answer is
// written: an agent that has its answer may close its input at once, and what Stop then
// logs as still running must not name the call it answered (before, it did, as "waiting up
// to 2s for 1 call", whenever the closing came before this goroutine's clean-up).
func (p *Proxy) request(ctx context.Context, own cancelEntry, key string, m *jsonrpc.Message, answered func()) {
	defer func() {
		p.cmu.Lock()
		if p.cancels[key].n == own.n {
			delete(p.cancels, key)
		}
		p.cmu.Unlock()
		own.cancel(nil)
	}()
	// A large answer read from the server keeps its share of the process's answer budget
	// (mcpstdio's, httpback's) while the call records it and until the agent's answer built
	// from it is written.
	ctx, done := budget.Hold(ctx)
	defer done()
	out := p.answer(ctx, m)
	answered()
	if out != nil {
		p.reply(out)
	} else if e, ok := p.out.(Ender); ok {
		e.NoResponse(m.ID) // cancelled by the agent: no response, but the front may end its wait
	}
}

// Ender is implemented by a Sink whose front waits for each request's response (an HTTP POST
// stream): NoResponse says that the request with id ends without one (the agent cancelled
// it, so MCP says none is sent).
type Ender interface {
	NoResponse(id json.RawMessage)
}

func (p *Proxy) answer(ctx context.Context, m *jsonrpc.Message) []byte {
	switch m.Method {
	case "initialize":
		return p.initialize(ctx, m)
	case "ping":
		return jsonrpc.Response(m.ID, json.RawMessage("{}"))
	case "tools/call":
		return p.toolsCall(ctx, m)
	case "tasks/get", "tasks/result", "tasks/cancel":
		if out := p.localTask(ctx, m); out != nil {
			return out
		}
	case "tasks/list":
		return p.tasksList(ctx, m)
	}
	return p.forward(ctx, m, "")
}

func (p *Proxy) initialize(ctx context.Context, m *jsonrpc.Message) []byte {
	p.mu.Lock()
	if p.initDone {
		p.mu.Unlock()
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidRequest, "effectfence wrap: initialize was already sent in this session"))
	}
	if p.child != nil {
		p.mu.Unlock()
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidRequest, "effectfence wrap: initialize is already in progress"))
	}
	if len(m.Params) == 0 || m.Params[0] != '{' {
		p.openInitGate()
		p.mu.Unlock()
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: initialize params must be an object"))
	}
	// The params are an object (valid JSON: the message was parsed). A clientInfo or name of
	// another type leaves the name empty; the server judges its params (they were refused as
	// "not an object" before).
	agent := p.noteClient(m.Params)
	child := p.opt.Backend(BackendConfig{
		Init: m.Params, InitTimeout: p.opt.InitTimeout, Log: p.opt.Log, Stderr: p.opt.ServerStderr,
		OnNotification: p.childNotification, OnRequest: p.childRequest,
	})
	p.child, p.agent = child, agent
	p.openInitGate()
	p.mu.Unlock()
	s, err := child.Session(ctx)
	if err != nil {
		why := strings.TrimPrefix(err.Error(), mcpstdio.ErrNotSent.Error()+": ")
		p.mu.Lock()
		p.child = nil // let the agent try again
		p.startErr = why
		p.mu.Unlock()
		_ = child.CloseWithin(childStopBudget)
		p.logf("%v", err)
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInternalError, "effectfence wrap: the MCP server did not start: %s", why))
	}
	p.mu.Lock()
	p.initDone, p.startErr = true, ""
	p.mu.Unlock()
	return jsonrpc.Response(m.ID, s.InitResult())
}

// openInitGate lets requests waiting for an initialize in progress go on; p.mu is held.
func (p *Proxy) openInitGate() {
	if p.initGate != nil {
		close(p.initGate)
		p.initGate = nil
	}
}

// forward passes a request to the child and its answer back, unchanged. It returns nil (no
// response) when the agent cancelled the request. tool names the tool of a tools/call passed
// through unfenced ("" for other requests): its redacted values are kept out of the child's
// stderr as reported (hide).
func (p *Proxy) forward(ctx context.Context, m *jsonrpc.Message, tool string) []byte {
	return p.forwardTo(ctx, nil, m, tool)
}

// forwardTo is forward to session s, or to the live session (started if none is) when s is
// nil. A tools/call passed through unfenced goes to the session whose listing judged it
// (toolInfo): if that session has ended, the call fails there, never sent to a later one.
func (p *Proxy) forwardTo(ctx context.Context, s Conn, m *jsonrpc.Message, tool string) []byte {
	var err error
	if s == nil {
		s, err = p.session(ctx)
	}
	if err != nil {
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInternalError, "effectfence wrap: the MCP server is not running: %v", err))
	}
	if tool != "" {
		p.hide(s, tool, m.Params)
	}
	var res json.RawMessage
	asked := p.tools.seen()
	if m.Method == "tasks/result" {
		// It waits for its task to end, for hours maybe, and takes no slot, as wrap's own
		// tasks/result does not (taskResult): an agent following as many tasks as there are
		// slots held every other request back, fenced calls included, until a task ended.
		res, err = s.Call(ctx, m.Method, m.Params)
	} else {
		res, err = p.callBounded(ctx, s, m.Method, m.Params)
	}
	var rpc *jsonrpc.Error
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // cancelled by the agent: MCP says no response is sent
	case errors.As(err, &rpc):
		return jsonrpc.ErrorResponse(m.ID, rpc)
	case err != nil:
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInternalError, "effectfence wrap: %v", err))
	}
	if m.Method == "tools/list" {
		p.learnTools(m.Params, res, asked, s)
	}
	return jsonrpc.Response(m.ID, res)
}

// callBounded sends one request to the child once a slot of the semaphore is free.
func (p *Proxy) callBounded(ctx context.Context, s Conn, method string, params json.RawMessage) (json.RawMessage, error) {
	return p.callBoundedUntil(ctx, ctx, s, method, params)
}

// callBoundedUntil is callBounded for a call detached from the agent once it has its slot: a
// free slot is taken whatever wait says (a fenced call the agent cancels as it arrives is
// still seen through), but while all are taken the call waits for one in wait and is not sent
// when wait ends. It then waits for the answer in ctx.
func (p *Proxy) callBoundedUntil(wait, ctx context.Context, s Conn, method string, params json.RawMessage) (json.RawMessage, error) {
	select {
	case p.sem <- struct{}{}:
	default:
		select {
		case p.sem <- struct{}{}:
		case <-wait.Done():
			return nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, wait.Err())
		}
	}
	defer func() { <-p.sem }()
	return s.Call(ctx, method, params)
}

// learnTools updates the tool cache from a tools/list page the agent asked for, of session s,
// when the cache's seen gave asked.
func (p *Proxy) learnTools(params, res json.RawMessage, asked uint64, s Conn) {
	page, next, err := parseTools(res)
	if err != nil {
		p.logf("%v", err)
		return
	}
	first := firstPage(params)
	var whole json.RawMessage
	if first && next == "" {
		whole = res
	}
	recorded, left := p.tools.learned(page, first, asked, s, p.live(), whole)
	if left {
		p.logf("the server lists more than %d tools; the ones beyond are fenced as unlisted tools are", maxTools)
	} else if recorded && first && next == "" && len(page) < maxTools {
		p.named.listed(page, p.logf) // the whole listing in one page
	}
}

// firstPage says whether the agent's tools/list params (valid JSON) ask for the listing's first
// page: no "cursor", spelled so, as MCP's SDKs read it (the last of that name), or an empty or
// null one. A cursor of another type is a later page, the safe side: that page is merged into
// what is known (a tool an earlier page lists as writing stays fenced) instead of replacing
// it. Before 2026-12-07 encoding/json read it, which also takes "Cursor" and keeps the last:
// {"cursor":"p2","Cursor":""} was the second page to the TypeScript SDK's server and the first
// to wrap, which replaced what it knew with that page alone (TestListingCursorIsReadAsTheServerReadsIt).
func firstPage(params json.RawMessage) bool {
	c := jsonrpc.MemberValue(params, "cursor")
	return c == nil || string(c) == `""` || string(c) == "null"
}

func (p *Proxy) childNotification(method string, params json.RawMessage) {
	if method == "notifications/tools/list_changed" {
		// Listed on another goroutine (waiting here for tools/list would deadlock: see
		// toolCache.changes). Asked before the agent sees the notification, so a tools/call
		// it sends in reply waits for the new listing (toolInfo).
		p.tools.changed(p.live, p.logf)
	}
	// Forwarded at once, in the order the child wrote it.
	p.reply(jsonrpc.Notification(method, params))
}

// childRequest forwards a request of the child (sampling, roots, elicitation) to the agent.
func (p *Proxy) childRequest(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	id := json.RawMessage(strconv.Quote("effectfence-" + strconv.FormatInt(p.nextID.Add(1), 10)))
	key := jsonrpc.IDKey(id)
	ch := make(chan agentAnswer, 1)
	p.pmu.Lock()
	p.pending[key] = ch
	p.pmu.Unlock()
	got := false
	defer func() {
		p.pmu.Lock()
		_, waiting := p.pending[key]
		delete(p.pending, key)
		p.pmu.Unlock()
		if !waiting && !got {
			// The agent's answer was taken for this request as it gave up: it is in ch (or
			// about to be, answered sends it just after taking it), holding its room.
			p.requests.Release((<-ch).held)
		}
	}()
	p.reply(jsonrpc.Request(id, method, params))
	select {
	case a := <-ch:
		got = true
		// The answer's room is kept until whoever asked (the server's session: mcpstdio
		// holds what it answers with until it is written) is done with it.
		if !p.requests.Keep(ctx, a.held) {
			defer p.requests.Release(a.held)
		}
		m := a.m
		if m.Error != nil {
			return nil, m.Error
		}
		return m.Result, nil
	case <-ctx.Done():
		// The server gave up on its request (or its session ended): tell the agent, under the
		// id the agent knows, so it stops asking its user.
		note := map[string]any{"requestId": id}
		var why *mcpstdio.CancelReason
		if errors.As(context.Cause(ctx), &why) && why.Reason != "" {
			note["reason"] = why.Reason // the server's reason, passed on as given
		}
		params, _ := json.Marshal(note)
		p.reply(jsonrpc.Notification("notifications/cancelled", params))
		return nil, ctx.Err()
	case <-p.agentGone:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client disconnected"}
	}
}
