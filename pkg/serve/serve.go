// Package serve is the fence as an MCP server: agents that want explicit control route each
// side effect through the tools fence_prepare, fence_commit, fence_abort, fence_release,
// fence_heartbeat, fence_status and fence_stats.
//
// The guarantee is the engine's (package fence): of all the attempts that share an intent, at
// most one is told "fresh" and runs the effect; the others are told "already_done" with the
// recorded cert, or refused with a tool error whose JSON carries a stable code, the facts and
// what to do next. A ticket an agent hands back is only a handle: the engine checks its
// intent, fencing token and nonce against the ledger, so a made-up or edited ticket changes
// nothing. Operator actions (clear, sweep) are not tools: an agent must not be able to unfence
// what it is fenced from.
//
// Limits: the fence can only stop effects that agents route through it, and a ledger outcome is
// only as durable as the store under the engine (the command opens the SQLite file by default).
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/budget"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Instructions is the server's MCP instructions: the protocol in three sentences.
const Instructions = `Before running any side effect, call fence_prepare with a stable intent id, the tool name and its args: status "fresh" means run the effect exactly once now, status "already_done" means do NOT run it and use cert.result instead. ` +
	`After running it, call fence_commit with the ticket and the result, fence_release if the effect definitely did not happen (with failed: true if it ran and failed definitely), or fence_abort if you cannot tell (call fence_heartbeat before lease_until while a long effect runs). ` +
	`Any tool error means do not run the effect: its JSON gives a stable code, the facts and the next step to take.`

// Defaults of Options.
const (
	DefaultWorkers     = 32
	DefaultQueue       = 1024
	DefaultMaxArgBytes = 1 << 20
	// MaxWait bounds wait_secs of fence_prepare.
	MaxWait = 60
	// MaxMessage bounds one message from the client (64 MiB, as wrap's), or MaxArgBytes and
	// 64 KiB for the rest of the message when that is more: a longer line is refused with a
	// JSON-RPC error and skipped, never held whole in memory.
	MaxMessage = 64 << 20
)

// RequestBudget bounds the bytes of large messages from the client that Serve holds at once:
// a line that grows past FreeMessage first reserves the most a line may have, cut to its
// length once it has ended, and keeps it until it is handled (a tool call: until it is
// answered; any other message: until mcp-go has taken it). While there is no room the
// client's input is not read further (back-pressure on the pipe); a line that finds none
// within a minute is skipped unread and answered with a JSON-RPC error: nothing ran. Eight
// 60 MiB calls at once took serve to 1.2 GiB and two minutes without it, though each was
// refused (docs/DECISIONS-serve.md).
const RequestBudget = 128 << 20

// FreeMessage is how long a message may be without reserving any of RequestBudget.
const FreeMessage = 1 << 20

// maxMessage is MaxMessage; requests the process's RequestBudget, requestWait how long a line
// waits for room in it (variables so tests can lower them).
var (
	maxMessage  = MaxMessage
	requests    = budget.NewPool(RequestBudget)
	requestWait = time.Minute
)

// Options tune a Server. The zero value means the defaults.
type Options struct {
	// Workers is how many tool calls are served at once (mcp-go's stdio worker pool, at most 100).
	Workers int
	// Queue is how many tool calls of one lane may wait in line for a worker before the reader
	// waits for room (back-pressure on the client).
	Queue int
	// MaxArgBytes bounds the JSON arguments of one tool call; a larger call is refused with
	// invalid_request (the ledger keeps args and results of every action).
	MaxArgBytes int
	// Version is reported in the initialize handshake.
	Version string
	// Log receives the server's diagnostics (stderr; never stdout, which carries protocol).
	Log *log.Logger
	// ClearHint is how an operator names this server's ledger to `effectfence ledger clear`
	// (`--ledger PATH`, maybe followed by a note in parentheses, which a refusal puts after
	// the command): a refusal of a fenced intent gives it in the command it names, which
	// without it reaches the operator's default ledger, not this one. "" names none.
	ClearHint string
	// InMemory says the engine's ledger is in this process's memory, which no `effectfence
	// ledger` command reaches: a refusal of a fenced intent names no clear command (one
	// without a ledger reaches the operator's default ledger, where it may clear another
	// intent of that name) and says a restart forgets it.
	InMemory bool
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	o.Workers = min(o.Workers, 100)
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.MaxArgBytes <= 0 {
		o.MaxArgBytes = DefaultMaxArgBytes
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Log == nil {
		o.Log = log.New(io.Discard, "", 0)
	}
	return o
}

// Server is the fence MCP server over one engine.
type Server struct {
	eng  *fence.Engine
	opts Options
	mcp  *server.MCPServer
}

// New returns a server whose tools act on eng, which is required.
func New(eng *fence.Engine, opts Options) (*Server, error) {
	if eng == nil {
		return nil, errors.New("serve: an engine is required (fence.New over a store, or store.Open)")
	}
	s := &Server{eng: eng, opts: opts.withDefaults()}
	s.mcp = server.NewMCPServer("effectfence", s.opts.Version,
		server.WithToolCapabilities(false),
		server.WithInstructions(Instructions),
	)
	if err := s.addTools(); err != nil {
		return nil, err
	}
	return s, nil
}

// MCP returns the underlying mcp-go server (for other transports and in-process tests). It
// has none of what Serve adds around it (docs/serve.md): mcp-go refuses a tools/call whose
// arguments hold a number beyond float64 (1e400) with JSON-RPC -32600 before any tool runs,
// so a fence_commit of such a result is not recorded through it, and a request's
// cancellation is not told from its session's end.
func (s *Server) MCP() *server.MCPServer { return s.mcp }

// Serve speaks MCP over stdio on in and out until in ends or ctx is cancelled. Only protocol
// messages are written to out. Tool calls are scheduled in lanes (lanes.go), so a settling call
// never waits behind waiting prepares. mcp-go keeps one stdio session per MCP server, so a
// Server serves one client at a time: a second Serve of it while one runs returns an error at
// once ("register session: session already exists") and the first is not disturbed. Servers
// made by separate New calls (over one engine or several) serve side by side.
func (s *Server) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	if in == nil || out == nil {
		return errors.New("serve: Serve needs an input and an output (the client's stdin and stdout)")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &lineWriter{w: out, ids: newIDs()}
	pr, pw := io.Pipe()
	std := server.NewStdioServer(s.mcp)
	std.SetErrorLogger(s.opts.Log)
	server.WithWorkerPoolSize(s.opts.Workers)(std)
	server.WithQueueSize(s.opts.Queue)(std)
	session := make(chan context.Context, 1)
	std.SetContextFunc(func(c context.Context) context.Context { session <- c; return c })
	listened := make(chan error, 1)
	go func() { listened <- std.Listen(ctx, pr, w) }()

	sc := &scheduler{s: s, out: w, requests: requests}
	select {
	case c := <-session:
		// The session's own context, kept where the tools can find it: mcp-go cancels one
		// request's context alone for its notifications/cancelled, and this one (with every
		// request's) only when Serve ends (see cancelledAlone).
		sc.ctx = context.WithValue(c, sessionKey{}, c)
	case err := <-listened:
		pr.Close()
		return fmt.Errorf("serve: %w", err)
	}
	for l := range sc.slots {
		sc.slots[l] = make(chan struct{}, s.opts.Workers)
		sc.line[l] = make(chan queuedCall, s.opts.Queue)
		sc.wg.Add(1)
		go sc.dispatch(lane(l))
	}

	lines, readDone, stop := make(chan line), make(chan error, 1), make(chan struct{})
	defer close(stop)
	go readLines(ctx, in, max(maxMessage, s.opts.MaxArgBytes+64<<10), sc.requests, requestWait, w, lines, readDone, stop)
	var readErr error
route:
	for {
		select {
		case ln := <-lines:
			if msg := mixedShape(ln.b); msg != nil {
				sc.requests.Release(ln.held)
				if _, err := w.Write(append(msg, '\n')); err != nil {
					readErr = err
					break route
				}
				continue
			}
			b := w.ids.wrap(ln.b)
			if l, noID, ok := classify(b); ok {
				if noID != hasID {
					sc.requests.Release(ln.held)
					if err := refuseIDless(w, s.opts.Log, noID); err != nil {
						readErr = err
						break route
					}
					continue
				}
				sc.run(l, b, ln.held)
				continue
			}
			if msg := tooDeep(b); msg != nil {
				sc.requests.Release(ln.held)
				if _, err := w.Write(append(msg, '\n')); err != nil {
					readErr = err
					break route
				}
				continue
			}
			sc.cancelQueued(b)
			_, err := pw.Write(b)
			sc.requests.Release(ln.held) // mcp-go has read it
			if err != nil {
				readErr = err
				break route
			}
		case readErr = <-readDone:
			break route
		case <-ctx.Done():
			break route
		}
	}
	// The client is gone: waits end (nobody is left to answer), settling calls finish (they
	// run detached from cancellation), then mcp-go drains what it holds. The calls still in
	// a lane's line run too (their waits end at once), so each is answered.
	for l := range sc.line {
		close(sc.line[l])
	}
	pw.Close()
	err := <-listened
	stopped := ctx.Err() != nil // the caller cancelled: not an error
	cancel()
	sc.wg.Wait()
	if err == nil && readErr != nil && readErr != io.EOF {
		err = readErr
	}
	if err != nil && !stopped {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// tooDeep returns the answer to line when it is a request nested deeper than encoding/json
// reads (10,000 levels of arrays and objects, the message's own included): a parse error
// under the request's own id, which can be read at any depth. mcp-go cannot read such a
// message and answered it under id null, which names no request, so the client waited for
// its own timeout (the TypeScript SDK's: 60 s). It returns nil for any other line, which
// goes on as before (a notification or a response so deep gets no answer: mcp-go's id null
// error, as before).
func tooDeep(line []byte) []byte {
	if canon.Valid(line) || !canon.ValidAnyDepth(line) {
		return nil // encoding/json reads it, or it is not JSON at all
	}
	id := jsonrpc.ReadableID(line)
	if id == nil || jsonrpc.AnswerID(line) != nil {
		return nil // no id to answer under, or no method: not a request
	}
	return jsonrpc.ErrorResponse(id, &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "effectfence serve: the message nests arrays and objects deeper than 10,000 levels, more than serve reads: it was NOT run; send it less deeply nested"})
}

// mixedShape returns the answer to line when it carries "method" beside "result" or "error":
// an invalid request under its id, not run. mcp-go took such a request for an answer and
// dropped it, so its client waited for its own timeout. It returns nil for any other line.
func mixedShape(line []byte) []byte {
	if _, err := jsonrpc.Parse(line); !errors.Is(err, jsonrpc.ErrMethodBesideAnswer) {
		return nil
	}
	return jsonrpc.ErrorResponse(jsonrpc.ReadableID(line), &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "effectfence serve: " + jsonrpc.ErrMethodBesideAnswer.Error() + ": it was NOT run; send the request without them"})
}

// refuseIDless answers a tools/call whose id is null, a boolean, an object or an array with an
// error under id null, and logs one without an id (a notification, which nothing may answer).
// None is run.
func refuseIDless(w io.Writer, logger *log.Logger, why idless) error {
	if why == noID {
		logger.Printf("a tools/call without an id (a notification) was NOT run: give it an id")
		return nil
	}
	what := "null"
	if why == badID {
		what = "a boolean, an object or an array"
	}
	msg := jsonrpc.ErrorResponse(nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "effectfence serve: a tools/call's id must be a string or a number (MCP), not " + what + ": it was NOT run; send it again with such an id"})
	_, err := w.Write(append(msg, '\n'))
	return err
}

// callResult sends v as JSON in a text block and as structuredContent.
func callResult(v any, isError bool) *mcp.CallToolResult {
	r := mcp.NewToolResultStructuredOnly(v)
	r.IsError = isError
	return r
}
