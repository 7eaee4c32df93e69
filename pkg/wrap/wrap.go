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
//     the duplicates that waited in this process receive the same failure.
//   - A child that dies, or a transport that fails, after the call was written leaves the
//     outcome unknown: the intent is fenced until an operator clears it, and every duplicate
//     is told it was not executed again and what the operator must run.
//
// Everything else (tools/list, resources, prompts, completion, logging, notifications both
// ways, the child's requests to the agent) passes through unfenced, byte for byte.
package wrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Defaults of the options.
const (
	DefaultWait          = 30 * time.Second
	DefaultMaxConcurrent = 64
	// MaxMessage bounds one message from the agent (64 MiB).
	MaxMessage = 64 << 20
)

// Options configure a Proxy.
type Options struct {
	// Command is the child MCP server's argv. Required.
	Command []string
	// Env is added to the child's environment.
	Env []string
	// Engine is the fence over the ledger. Required.
	Engine *fence.Engine
	// ClearHint is how an operator names this ledger to `effectfence ledger clear`, e.g.
	// "--for -- npx -y server" or "--ledger /path/to.db". It is put in the messages of fenced
	// calls.
	ClearHint string
	// Wait bounds how long a duplicate waits for the attempt in flight (default DefaultWait).
	Wait time.Duration
	// FenceReads fences tools annotated readOnlyHint too.
	FenceReads bool
	// Fence and Pass force tools in or out of the fence (Pass wins).
	Fence, Pass []string
	// Ignore removes fields from a tool's identity; Key names a tool's identity fields.
	Ignore map[string][]Path
	Key    map[string][]Path
	// NoInjectKey turns off filling an empty idempotency-key-like argument.
	NoInjectKey bool
	// MaxConcurrent bounds the requests forwarded to the child at once (default
	// DefaultMaxConcurrent). Duplicates waiting for an attempt in flight, pings and replays
	// take no slot, so they never queue behind slow calls.
	MaxConcurrent int
	// InitTimeout bounds the child's answer to initialize (default mcpstdio's).
	InitTimeout time.Duration
	// Log receives diagnostics and the child's stderr. Required.
	Log io.Writer
}

// Proxy is one wrap session between one agent and its child.
type Proxy struct {
	opt   Options
	out   *jsonrpc.Writer
	fence map[string]bool
	pass  map[string]bool

	mu       sync.Mutex
	child    *mcpstdio.Child
	agent    string
	initDone bool
	// startErr is why the last start of the child failed (nil once one succeeds), so later
	// requests say what failed rather than that initialize was never sent.
	startErr string

	tools   toolCache
	flights flights
	sem     chan struct{}
	calls   sync.WaitGroup

	nextID    atomic.Int64
	pmu       sync.Mutex
	pending   map[string]chan *jsonrpc.Message
	agentGone chan struct{} // closed when the agent's input ends

	cmu     sync.Mutex
	cancels map[string]context.CancelCauseFunc // by the agent's request id
}

// New checks opt and returns a Proxy.
func New(opt Options) (*Proxy, error) {
	if len(opt.Command) == 0 || opt.Command[0] == "" {
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
	p := &Proxy{opt: opt, fence: set(opt.Fence), pass: set(opt.Pass), sem: make(chan struct{}, opt.MaxConcurrent), pending: map[string]chan *jsonrpc.Message{}, agentGone: make(chan struct{}), cancels: map[string]context.CancelCauseFunc{}}
	p.flights.m = map[string]*flight{}
	return p, nil
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
// cancelled. It then waits for forwarded tool calls to finish and be recorded (up to the lease
// TTL, after which they are recorded as unknown) and stops the child.
func (p *Proxy) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	p.out = jsonrpc.NewWriter(out)
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		r := jsonrpc.NewReader(in, MaxMessage)
		for {
			line, err := r.ReadLine()
			if err == jsonrpc.ErrTooLong {
				p.reply(jsonrpc.ErrorResponse(nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("message longer than %d bytes refused", MaxMessage)}))
				continue
			}
			if err != nil {
				readErr <- err
				return
			}
			select {
			case lines <- line:
			case <-ctx.Done():
				readErr <- ctx.Err()
				return
			}
		}
	}()
	var err error
loop:
	for {
		select {
		case line := <-lines:
			p.dispatch(line)
		case err = <-readErr:
			break loop
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		err = nil
	}
	close(p.agentGone) // requests of the child to the agent can no longer be answered
	p.drain()
	return err
}

// drain waits for running calls, then closes the child (which fails what is still running).
func (p *Proxy) drain() {
	done := make(chan struct{})
	go func() { p.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(p.opt.Engine.Config().LeaseTTL):
		p.logf("calls still running after %s; stopping the MCP server, their outcome is recorded as unknown", p.opt.Engine.Config().LeaseTTL)
	}
	p.mu.Lock()
	c := p.child
	p.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	<-done
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

// dispatch routes one message from the agent. Requests run on their own goroutines (what
// they forward to the child is bounded by the semaphore); responses and notifications are
// handled at once, so an answer the child is waiting for never queues behind busy requests.
func (p *Proxy) dispatch(line []byte) {
	m, err := jsonrpc.Parse(line)
	if err != nil {
		// Invalid JSON is a parse error with id null. Valid JSON that is not a valid message
		// is an invalid request, answered with its id when it had a readable one, so the
		// agent's request does not wait for an answer that never comes.
		code := jsonrpc.CodeInvalidRequest
		if !json.Valid(line) {
			code = jsonrpc.CodeParseError
		}
		p.reply(jsonrpc.ErrorResponse(jsonrpc.ReadableID(line), rpcErr(code, "effectfence wrap: cannot parse the message: %v", err)))
		return
	}
	switch {
	case m.IsResponse():
		p.pmu.Lock()
		ch := p.pending[string(m.ID)]
		delete(p.pending, string(m.ID))
		p.pmu.Unlock()
		if ch == nil {
			p.logf("the agent answered request id %s that is not waiting; ignored", m.ID)
			return
		}
		ch <- m
	case m.IsNotification():
		p.notify(m)
	case m.IsRequest():
		p.calls.Add(1)
		go func() {
			defer p.calls.Done()
			p.request(m)
		}()
	default:
		p.reply(jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidRequest, "effectfence wrap: not a request, response or notification")))
	}
}

func (p *Proxy) notify(m *jsonrpc.Message) {
	switch m.Method {
	case "notifications/initialized":
		return // sent to the child by the handshake already
	case "notifications/cancelled":
		// Forwarded for pass-through requests only: a fenced tool call is detached from the
		// agent's cancellation on purpose (an agent that gives up must not abort a charge
		// half way). Session.Call tells the child when its context is cancelled.
		// The agent's reason is passed on as it was given (none when it gave none).
		var c struct {
			RequestID json.RawMessage `json:"requestId"`
			Reason    json.RawMessage `json:"reason"`
		}
		if json.Unmarshal(m.Params, &c) == nil && c.RequestID != nil {
			p.cmu.Lock()
			cancel := p.cancels[string(c.RequestID)]
			p.cmu.Unlock()
			if cancel != nil {
				var why mcpstdio.CancelReason
				_ = json.Unmarshal(c.Reason, &why.Reason) // a reason that is not a string is dropped
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

// live returns the current session without starting one.
func (p *Proxy) live() *mcpstdio.Session {
	p.mu.Lock()
	c := p.child
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Current()
}

// session returns a live session, restarting a dead child.
func (p *Proxy) session(ctx context.Context) (*mcpstdio.Session, error) {
	p.mu.Lock()
	c := p.child
	p.mu.Unlock()
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

func (p *Proxy) request(m *jsonrpc.Message) {
	ctx, cancel := context.WithCancelCause(context.Background())
	key := string(m.ID)
	p.cmu.Lock()
	p.cancels[key] = cancel
	p.cmu.Unlock()
	defer func() {
		p.cmu.Lock()
		delete(p.cancels, key)
		p.cmu.Unlock()
		cancel(nil)
	}()
	p.answer(ctx, m)
}

func (p *Proxy) answer(ctx context.Context, m *jsonrpc.Message) {
	switch m.Method {
	case "initialize":
		p.reply(p.initialize(ctx, m))
	case "ping":
		p.reply(jsonrpc.Response(m.ID, json.RawMessage("{}")))
	case "tools/call":
		p.reply(p.toolsCall(ctx, m))
	default:
		p.reply(p.forward(ctx, m))
	}
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
	var params struct {
		ClientInfo struct {
			Name string `json:"name"`
		} `json:"clientInfo"`
	}
	if len(m.Params) == 0 || m.Params[0] != '{' || json.Unmarshal(m.Params, &params) != nil {
		p.mu.Unlock()
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: initialize params must be an object"))
	}
	child := mcpstdio.NewChild(mcpstdio.Config{
		Command: p.opt.Command, Env: p.opt.Env, Stderr: p.opt.Log, Init: m.Params, InitTimeout: p.opt.InitTimeout,
		OnNotification: p.childNotification, OnRequest: p.childRequest,
	})
	p.child, p.agent = child, params.ClientInfo.Name
	p.mu.Unlock()
	s, err := child.Session(ctx)
	if err != nil {
		why := strings.TrimPrefix(err.Error(), mcpstdio.ErrNotSent.Error()+": ")
		p.mu.Lock()
		p.child = nil // let the agent try again
		p.startErr = why
		p.mu.Unlock()
		_ = child.Close()
		p.logf("%v", err)
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInternalError, "effectfence wrap: the MCP server did not start: %s", why))
	}
	p.mu.Lock()
	p.initDone, p.startErr = true, ""
	p.mu.Unlock()
	return jsonrpc.Response(m.ID, s.InitResult())
}

// forward passes a request to the child and its answer back, unchanged. It returns nil (no
// response) when the agent cancelled the request.
func (p *Proxy) forward(ctx context.Context, m *jsonrpc.Message) []byte {
	s, err := p.session(ctx)
	if err != nil {
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInternalError, "effectfence wrap: the MCP server is not running: %v", err))
	}
	res, err := p.callBounded(ctx, s, m.Method, m.Params)
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
		p.learnTools(m.Params, res)
	}
	return jsonrpc.Response(m.ID, res)
}

// callBounded sends one request to the child once a slot of the semaphore is free.
func (p *Proxy) callBounded(ctx context.Context, s *mcpstdio.Session, method string, params json.RawMessage) (json.RawMessage, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, ctx.Err())
	}
	defer func() { <-p.sem }()
	return s.Call(ctx, method, params)
}

// learnTools updates the tool cache from a tools/list page the agent asked for.
func (p *Proxy) learnTools(params, res json.RawMessage) {
	page, _, err := parseTools(res)
	if err != nil {
		p.logf("%v", err)
		return
	}
	var q struct {
		Cursor string `json:"cursor"`
	}
	_ = json.Unmarshal(params, &q)
	p.tools.merge(page, q.Cursor == "")
}

func (p *Proxy) childNotification(method string, params json.RawMessage) {
	if method == "notifications/tools/list_changed" {
		if s := p.live(); s != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := p.tools.refresh(ctx, s); err != nil {
				p.logf("refreshing the tool list after list_changed: %v", err)
			}
			cancel()
		}
	}
	p.reply(jsonrpc.Notification(method, params))
}

// childRequest forwards a request of the child (sampling, roots, elicitation) to the agent.
func (p *Proxy) childRequest(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	id := json.RawMessage(strconv.Quote("effectfence-" + strconv.FormatInt(p.nextID.Add(1), 10)))
	ch := make(chan *jsonrpc.Message, 1)
	p.pmu.Lock()
	p.pending[string(id)] = ch
	p.pmu.Unlock()
	defer func() {
		p.pmu.Lock()
		delete(p.pending, string(id))
		p.pmu.Unlock()
	}()
	p.reply(jsonrpc.Request(id, method, params))
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, m.Error
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.agentGone:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client disconnected"}
	}
}
