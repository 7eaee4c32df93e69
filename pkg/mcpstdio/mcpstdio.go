// Package mcpstdio talks to an MCP server that runs as a child process over stdio: it spawns
// the child, performs the initialize handshake with the capabilities the caller forwards,
// sends concurrent requests and matches their responses, delivers the child's notifications
// and requests to callbacks, copies the child's stderr to ours, and shuts the child down.
//
// Results are returned as the exact bytes the child wrote (json.RawMessage), so a proxy can
// mirror a tools/list result or a tool result byte for byte.
//
// What a caller can rely on when a call fails:
//   - errors.Is(err, ErrNotSent): the request never reached the child (it was already gone or
//     its stdin was closed); the call definitely did not run.
//   - *RPCError: the child answered with a JSON-RPC error.
//   - *ExitError without ErrNotSent: the child died or closed its stdout after the request was
//     written; whether the call ran is unknown.
//   - a context error: the caller stopped waiting; the child may still run the call.
//
// Order: what the child writes reaches the caller in the order it wrote it, as a proxy needs
// (a progress notification written just before a result must reach the agent before that
// result). Notifications are delivered to Config.OnNotification one at a time, in order, on a
// goroutine of the session; a response is handed to its Call only once every notification the
// child wrote before it has been delivered (OnNotification returned). The reader itself never
// waits for OnNotification, so a slow callback delays what follows it, not the reading.
// Hence OnNotification must not wait for a Call of the same session: that Call's response
// would queue behind the notification being delivered, forever. Start a goroutine instead.
//
// Requests from the child take their place in the same order: OnRequest for a request is
// called only once the notifications written before it have been delivered. It then runs on
// its own goroutine, because it waits for an answer (from the agent, for a proxy) that may
// take minutes and must not hold up the notifications and responses behind it; what the child
// writes after a request may therefore be delivered before OnRequest has passed the request
// on. That cannot mislead anyone: the child cannot have acted on its request's answer before
// it receives it, so nothing it writes meanwhile depends on the request having been seen.
//
// Session is one child process; Child restarts the process when a session has ended.
package mcpstdio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/internal/budget"
	"github.com/effectfence/effectfence/pkg/internal/hide"
	"github.com/effectfence/effectfence/pkg/internal/inbound"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// DefaultProtocolVersion is the MCP protocol version offered when Config.Init is empty.
const DefaultProtocolVersion = "2025-06-18"

// MaxLine bounds one message from the child (64 MiB); longer lines are skipped and logged.
const MaxLine = 64 << 20

// AnswerBudget bounds the bytes of large messages from children that the process holds at
// once, across every session: a line that grows past FreeLine first reserves MaxLine, cut to
// its length once it has ended, and keeps it until it is delivered (a response: until its Call
// returns, or, under budget.Hold, until the caller is done with the result; a notification:
// until OnNotification returns; a request: until it is answered). While there is no room the
// child's output is not read further (back-pressure on its pipe); a line that finds none
// within a minute is skipped unread, as a line longer than MaxLine is: a Call it answers fails
// as one whose server may have run it, never as not sent. Eight 60 MiB answers at once took
// a wrap to 1.4 GiB without it (docs/DECISIONS-wrap.md).
const AnswerBudget = 128 << 20

// FreeLine is how long a line from a child may be without reserving any of AnswerBudget.
const FreeLine = 1 << 20

// answers is the process's AnswerBudget, budgetWait how long a line waits for room in it
// (variables so tests can lower them).
var (
	answers    = budget.NewPool(AnswerBudget)
	budgetWait = time.Minute
)

// MaxInbound bounds the child's requests waiting for their answer (from Config.OnRequest) at
// once; beyond it a request is refused at once with a JSON-RPC error, so a child cannot make
// the session keep without bound requests the client is slow to answer.
const MaxInbound = inbound.Max

// Defaults for Config.
const (
	DefaultInitTimeout = 30 * time.Second
	// closeGrace is how long Close waits after closing stdin, and again after SIGTERM.
	closeGrace = 2 * time.Second
)

// Config says how to run the child and how to handle what it sends.
type Config struct {
	// Command is the child's argv. Required.
	Command []string
	// Env is added to this process's environment for the child.
	Env []string
	// Dir is the child's working directory ("" for ours).
	Dir string
	// Stderr receives the child's stderr, in whole lines (a line not ended when the child
	// exits is ended; one longer than 64 KiB is cut into lines), so that the lines of children
	// sharing a writer never mix. Default os.Stderr.
	Stderr io.Writer
	// Log receives this package's diagnostics, one line each starting "mcpstdio: ", with
	// whatever the child sent escaped (internal/safetext), so a line is never the child's.
	// Default Stderr.
	Log io.Writer
	// Init is the params object of the initialize request, sent as given (a proxy forwards its
	// own client's params, since a child's tools can depend on the client's capabilities).
	// Empty means DefaultInit().
	Init json.RawMessage
	// InitTimeout bounds the wait for the initialize response. Default DefaultInitTimeout.
	InitTimeout time.Duration
	// OnNotification receives each notification from the child, in order, on one goroutine
	// owned by the session. A response the child wrote after a notification reaches its Call
	// only once OnNotification has returned for it (see "Order" in the package comment), so
	// OnNotification may call the session's methods but must not wait for a Call's response:
	// that deadlocks. Run such work on another goroutine.
	OnNotification func(method string, params json.RawMessage)
	// OnRequest answers a request from the child (sampling, roots, elicitation...). It is
	// called once the notifications the child wrote before the request have been delivered,
	// on its own goroutine per request. Return a *jsonrpc.Error to send that error. Nil answers
	// every request except ping with "method not found". Pings are answered here.
	OnRequest func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
}

// DefaultInit returns initialize params that offer DefaultProtocolVersion and no capabilities.
func DefaultInit(clientName, clientVersion string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"protocolVersion": DefaultProtocolVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]string{"name": clientName, "version": clientVersion},
	})
	return b
}

// CancelReason, as the cause of a context's cancellation (context.WithCancelCause), is what
// Session.Call sends as the "reason" of notifications/cancelled when that context ends the
// call: a proxy passes its client's reason on unchanged. An empty Reason sends none. Without
// it the reason is the context's error ("context canceled").
type CancelReason struct{ Reason string }

func (c *CancelReason) Error() string {
	if c.Reason == "" {
		return "cancelled"
	}
	return "cancelled: " + c.Reason
}

// ErrNotSent marks an error of a request that never reached the child.
var ErrNotSent = errors.New("mcpstdio: request not sent")

// RPCError is a JSON-RPC error the child answered with.
type RPCError = jsonrpc.Error

// ExitError says the child's session ended: the process exited, closed its stdout, was
// closed by Close, or never completed the handshake.
type ExitError struct {
	// Command is the server's program (the base name of its command's first word), not its
	// command line: the arguments can carry a secret (an API key, an Authorization header
	// for mcp-remote), and this error reaches the ledger as the reason of the call the server
	// died during, an on_unknown hook and the agent (docs/privacy.md).
	Command string
	// Why is what ended it ("exited with status 3", "closed its stdout", "closed").
	Why string
	// Stderr is the tail of what the child wrote to stderr (at most 2 KiB), with the texts
	// given to Session.Hide shown as [redacted].
	Stderr string
}

func (e *ExitError) Error() string {
	s := fmt.Sprintf("MCP server %s: %s", e.Command, e.Why)
	if t := strings.TrimSpace(e.Stderr); t != "" {
		s += "; its stderr ended with: " + t
	}
	return s
}

// Session is one running child that completed the handshake. It is safe for concurrent use.
type Session struct {
	cfg Config
	// answers and roomWait are AnswerBudget and how long a line waits for room in it, as they
	// were when the session started.
	answers  *budget.Pool
	roomWait time.Duration
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out      *jsonrpc.Writer
	tail     *tailWriter
	init     json.RawMessage

	nextID  atomic.Int64
	mu      sync.Mutex
	pending map[string]chan reply
	inbound inbound.Table // the child's requests being answered, at most MaxInbound
	err     error         // why the session ended; set once, before done closes
	done    chan struct{}
	exited  chan struct{} // cmd.Wait returned
	exitMsg string

	// notes carries, in the child's order, what must wait for the notifications before it:
	// notifications, requests, and responses read while a notification was undelivered.
	notes    chan note
	notesEnd chan struct{}
	// backlog counts the notes read and not yet delivered; only the reader adds to it.
	backlog  atomic.Int64
	reqCtx   context.Context
	reqStop  context.CancelFunc
	closing  atomic.Bool
	closeErr error
	closeMu  sync.Mutex
}

type reply struct {
	result json.RawMessage
	err    error
	held   int64 // the room of AnswerBudget the response's line holds
}

// note is one message in the delivery queue: a notification (method, params), a request of
// the child (req), or a response to hand to a waiting Call (to, r).
type note struct {
	method string
	params json.RawMessage
	req    *jsonrpc.Message
	to     chan reply
	r      reply
	long   json.RawMessage // the id of a request of the child's that was skipped unread
	why    string          // why it was skipped
	held   int64           // the room of AnswerBudget the line of a notification or request holds
}

// Start spawns the child and performs the initialize handshake (initialize, then
// notifications/initialized). If the child exits, writes nothing valid, or does not answer
// within cfg.InitTimeout, Start kills it and returns an error that says which, with the tail
// of its stderr.
func Start(ctx context.Context, cfg Config) (*Session, error) {
	return start(ctx, cfg, nil)
}

// start is Start; spawned, when set, is given the session as soon as its process runs, before
// the handshake (a Child's Close or Kill must reach a child that is still starting).
func start(ctx context.Context, cfg Config, spawned func(*Session)) (*Session, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("mcpstdio: no command given for the MCP server")
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Log == nil {
		cfg.Log = cfg.Stderr
	}
	if cfg.InitTimeout <= 0 {
		cfg.InitTimeout = DefaultInitTimeout
	}
	if len(cfg.Init) == 0 {
		cfg.Init = DefaultInit("effectfence", "dev")
	}
	if !json.Valid(cfg.Init) || bytes.TrimSpace(cfg.Init)[0] != '{' {
		return nil, errors.New("mcpstdio: initialize params must be a JSON object")
	}
	s := &Session{
		cfg: cfg, answers: answers, roomWait: budgetWait, pending: map[string]chan reply{}, done: make(chan struct{}), exited: make(chan struct{}),
		notes: make(chan note, 1024), notesEnd: make(chan struct{}), tail: &tailWriter{w: cfg.Stderr, max: 2048},
	}
	s.reqCtx, s.reqStop = context.WithCancel(context.Background())
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Dir = cfg.Dir
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Stderr = s.tail
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = closeGrace
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("mcpstdio: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("mcpstdio: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("mcpstdio: cannot start MCP server %s: %w", s.name(), err)
	}
	s.cmd, s.stdin, s.out = cmd, stdin, jsonrpc.NewWriter(stdin)
	go s.wait()
	go s.read(stdout)
	go s.deliver()
	if spawned != nil {
		spawned(s)
	}

	ictx, cancel := context.WithTimeout(ctx, cfg.InitTimeout)
	defer cancel()
	res, err := s.Call(ictx, "initialize", cfg.Init)
	if err == nil && (len(res) == 0 || res[0] != '{') {
		err = fmt.Errorf("initialize result is not a JSON object: %.200s", res)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("did not answer initialize within %s", cfg.InitTimeout)
		}
		s.Close()
		var ee *ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("mcpstdio: handshake failed: %w", err)
		}
		if errors.Is(err, ErrNotSent) {
			// The initialize could not be written: the server closed its stdin, most often by
			// exiting before its exit was seen. Once it is reaped, say how it ended (before,
			// "exit status 3" was missing whenever the write failed first).
			select {
			case <-s.exited:
				err = fmt.Errorf("%w; it %s", err, s.exitMsg)
			case <-time.After(closeGrace):
			}
		}
		return nil, fmt.Errorf("mcpstdio: handshake with MCP server %s failed: %w%s", s.name(), err, s.tail.suffix())
	}
	s.init = res
	if err := s.Notify("notifications/initialized", nil); err != nil {
		s.Close()
		return nil, fmt.Errorf("mcpstdio: handshake failed: %w", err)
	}
	return s, nil
}

// name is the server as errors and logs name it: its program, quoted. Never its command line,
// whose arguments can carry a secret: a start that fails during a call is that call's reason
// in the ledger ("the call was never sent: ..."), as the end of a session is (ExitError).
func (s *Session) name() string { return strconv.Quote(s.program()) }

// program is the base name of the server command's first word.
func (s *Session) program() string { return filepath.Base(s.cfg.Command[0]) }

// InitResult is the child's initialize result, as it wrote it.
func (s *Session) InitResult() json.RawMessage { return s.init }

// Pid is the child's process id.
func (s *Session) Pid() int { return s.cmd.Process.Pid }

// Group returns the process group the server and the processes it starts run in, the
// server's pid (it leads a group of its own), or 0 on a platform where it has none.
func (s *Session) Group() int {
	if !ownGroup {
		return 0
	}
	return s.cmd.Process.Pid
}

// Done is closed when the session has ended; Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Exited is closed once the child process has exited and been reaped (and its output has
// been read, or WaitDelay passed). A session can end before its process does: one that
// closed its stdout is stopped at once (Close), and Close gives the child time to exit.
func (s *Session) Exited() <-chan struct{} { return s.exited }

// Err returns nil while the session is live, and then why it ended (an *ExitError).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Call sends a request and waits for its response. params is sent exactly as given (nil
// omits it). See the package comment for what each error means.
func (s *Session) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if params != nil && !json.Valid(params) {
		return nil, fmt.Errorf("%w: params of %s are not valid JSON", ErrNotSent, method)
	}
	if err := ctx.Err(); err != nil {
		// Ended before it was sent: sending it would start a call only to cancel it, which a
		// server may have run by the time the cancellation arrives.
		return nil, fmt.Errorf("%w: %s: %w", ErrNotSent, method, context.Cause(ctx))
	}
	id := json.RawMessage(strconv.FormatInt(s.nextID.Add(1), 10))
	// Calls wait by the id's value: a server answers with the same value (JSON-RPC), which it
	// may spell otherwise (7.0 for 7, from a JSON library that reads every number as a double).
	key := jsonrpc.IDKey(id)
	ch := make(chan reply, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	s.pending[key] = ch
	s.mu.Unlock()
	if err := s.out.Write(jsonrpc.Request(id, method, params)); err != nil {
		s.forget(key)
		return nil, fmt.Errorf("%w: writing to MCP server %s: %w", ErrNotSent, s.name(), err)
	}
	select {
	case r := <-ch:
		// The response's room is the caller's to keep (budget.Hold) until it is done with the
		// result, else it goes back now.
		if !s.answers.Keep(ctx, r.held) {
			s.answers.Release(r.held)
		}
		return r.result, r.err
	case <-ctx.Done():
		if !s.forget(key) {
			// Its response was read as the call gave up: it is on its way to ch (resolve
			// sends it, at once or in order through the delivery queue), holding room.
			go func() { s.answers.Release((<-ch).held) }()
		}
		note := map[string]any{"requestId": id, "reason": ctx.Err().Error()}
		var why *CancelReason
		if errors.As(context.Cause(ctx), &why) {
			note["reason"] = why.Reason
			if why.Reason == "" {
				delete(note, "reason")
			}
		}
		p, _ := json.Marshal(note)
		_ = s.Notify("notifications/cancelled", p)
		return nil, ctx.Err()
	}
}

// forget takes the call key out of pending, reporting whether it was still there (no response
// had been taken for it, nor the session ended).
func (s *Session) forget(key string) bool {
	s.mu.Lock()
	_, ok := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	return ok
}

// Notify sends a notification. params may be nil.
func (s *Session) Notify(method string, params json.RawMessage) error {
	if params != nil && !json.Valid(params) {
		return fmt.Errorf("%w: params of %s are not valid JSON", ErrNotSent, method)
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	if err := s.out.Write(jsonrpc.Notification(method, params)); err != nil {
		return fmt.Errorf("%w: writing to MCP server %s: %w", ErrNotSent, s.name(), err)
	}
	return nil
}

// ListTools sends tools/list (with cursor when not empty) and returns the raw result.
func (s *Session) ListTools(ctx context.Context, cursor string) (json.RawMessage, error) {
	var params json.RawMessage
	if cursor != "" {
		params, _ = json.Marshal(map[string]string{"cursor": cursor})
	}
	return s.Call(ctx, "tools/list", params)
}

// CallTool sends tools/call for name with args (a JSON object; nil sends none) and returns
// the raw result.
func (s *Session) CallTool(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	p := map[string]any{"name": name}
	if args != nil {
		if !json.Valid(args) {
			return nil, fmt.Errorf("%w: arguments of %s are not valid JSON", ErrNotSent, name)
		}
		p["arguments"] = args
	}
	params, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return s.Call(ctx, "tools/call", params)
}

// Hide has the tail of the child's stderr that an ExitError carries show "[redacted]" in place
// of each of texts (the redacted argument values of a call sent to this child), for the rest of the session: a server that logs the calls it is sent
// prints them there, and the session's end may come during another call, whose outcome's
// reason quotes the tail. A value the tail holds only in part (its beginning fell outside the
// kept bytes, or the child stopped half way through writing it) is taken out too. At most
// 1 MiB of texts is kept; past that the tail is not shown at all.
func (s *Session) Hide(texts []string) { s.tail.hide(texts) }

// Close ends the session: it closes the child's stdin (the MCP way to ask a stdio server to
// exit), then sends SIGTERM and finally SIGKILL to the child's process group if it lingers.
// Calls still waiting fail with an *ExitError. Close is idempotent.
func (s *Session) Close() error { return s.stop(closeGrace) }

// CloseWithin is Close with a total budget: the child gets half of within to exit after its
// stdin closes, the other half after SIGTERM, and is then killed. Calls still waiting fail at
// once, before any of that waiting.
func (s *Session) CloseWithin(within time.Duration) error { return s.stop(within / 2) }

// Kill ends the session at once: calls still waiting fail and the child's process group gets
// SIGKILL without waiting. For a parent that must exit now.
func (s *Session) Kill() error { return s.stop(0) }

func (s *Session) stop(grace time.Duration) error {
	if grace <= 0 && s.closing.Load() {
		signalGroup(s.cmd.Process, syscall.SIGKILL) // a Close in progress must not delay a Kill
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closing.Swap(true) {
		return s.closeErr
	}
	s.end(&ExitError{Command: s.program(), Why: "closed", Stderr: s.tail.String()})
	_ = s.stdin.Close()
	if grace <= 0 {
		signalGroup(s.cmd.Process, syscall.SIGKILL)
	}
	select {
	case <-s.exited:
	case <-time.After(grace):
		signalGroup(s.cmd.Process, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(grace):
			signalGroup(s.cmd.Process, syscall.SIGKILL)
			<-s.exited
		}
	}
	<-s.notesEnd
	return s.closeErr
}

// end records why the session ended (first caller wins) and fails every waiting call.
func (s *Session) end(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	pending := s.pending
	s.pending = map[string]chan reply{}
	close(s.done)
	s.mu.Unlock()
	for _, ch := range pending {
		ch <- reply{err: err}
	}
	s.reqStop()
}

func (s *Session) wait() {
	err := s.cmd.Wait()
	s.tail.flush() // the copy of its stderr is over
	if err != nil {
		s.exitMsg = "exited: " + err.Error()
	} else {
		s.exitMsg = "exited with status 0"
	}
	close(s.exited)
	// A child that exits while a grandchild keeps its stdout open still ends the session.
	s.end(&ExitError{Command: s.program(), Why: s.exitMsg, Stderr: s.tail.String()})
}

func (s *Session) logf(format string, a ...any) {
	fmt.Fprintln(s.cfg.Log, "mcpstdio: "+safetext.Escape(fmt.Sprintf(format, a...)))
}

func (s *Session) read(stdout io.Reader) {
	r := jsonrpc.NewReader(stdout, MaxLine)
	r.Meter(s.reqCtx, s.answers, FreeLine, s.roomWait)
	for {
		line, err := r.ReadLine()
		if err == jsonrpc.ErrTooLong || err == jsonrpc.ErrNoRoom {
			why := fmt.Sprintf("a line longer than %d bytes", MaxLine)
			if err == jsonrpc.ErrNoRoom {
				why = fmt.Sprintf("a line that found no room for %s in the %d MiB the large messages of this process may take (see mcpstdio.AnswerBudget)", s.roomWait, s.answers.Total()>>20)
			}
			if id := r.SkippedID(); id != nil && s.resolveSkipped(id, why) {
				continue
			}
			if id := r.SkippedRequestID(); id != nil {
				// A request (sampling, elicitation, roots) nobody can read: refused under
				// its id, so the server is not left waiting for an answer.
				s.logf("MCP server %s sent request %s in %s; refused unread", s.name(), jsonrpc.LogID(id), why)
				s.queue(note{long: id, why: why})
				continue
			}
			s.logf("MCP server %s wrote %s; skipped", s.name(), why)
			continue
		}
		held := r.Held()
		if err != nil {
			why := "closed its stdout"
			// Prefer the exit status when the process is gone too.
			select {
			case <-s.exited:
				why = s.exitMsg
			case <-time.After(200 * time.Millisecond):
			}
			s.end(&ExitError{Command: s.program(), Why: why, Stderr: s.tail.String()})
			close(s.notes)
			if why == "closed its stdout" {
				// It runs on, and nothing it does can reach us any more: stopped now, with
				// what it started (as Close stops it), not left running until the next use
				// restarts it. Left, it could go on with a call already reported lost, whose
				// claim its holder judged by the live leader and an operator could free.
				go s.Close()
			}
			return
		}
		m, perr := jsonrpc.ParseOwned(line) // the line is ours: ReadLine returns a new one each time
		if perr != nil {
			s.answers.Release(held)
			if s.resolveInvalid(line, perr) {
				continue
			}
			s.logf("MCP server %s wrote a line that is not a JSON-RPC message (%v); ignored: %.200q", s.name(), perr, line)
			continue
		}
		switch {
		case m.IsResponse():
			r := reply{result: m.Result, held: held}
			if m.Error != nil {
				r = reply{err: m.Error, held: held}
			}
			s.resolve(m.ID, r)
		case m.IsNotification():
			s.queue(note{method: m.Method, params: m.Params, held: held})
		case m.IsRequest():
			s.queue(note{req: m, held: held})
		default:
			s.answers.Release(held)
			s.logf("MCP server %s wrote a message that is neither request, response nor notification; ignored: %.200q", s.name(), line)
		}
	}
}

// queue appends n to the delivery queue (called by the reader only).
func (s *Session) queue(n note) {
	s.backlog.Add(1)
	s.notes <- n
}

// resolveInvalid answers a waiting Call whose answer is a line that is not a valid JSON-RPC
// response (an "error" that is not an object, a result beside an error, …) but names the
// call's id and no method: the server did answer, so the call must not wait for an answer
// that already came (until the session ends). The Call fails with an error that is neither
// a *jsonrpc.Error nor ErrNotSent: the server may have run it (see wrap's Conn). It reports
// whether line answered a waiting call.
func (s *Session) resolveInvalid(line []byte, perr error) bool {
	id := jsonrpc.AnswerID(line)
	return id != nil && s.failWaiting(id, func() error {
		return fmt.Errorf("MCP server %s answered request %s with a line that is not a valid JSON-RPC response (%v): %.200q", s.name(), id, perr, line)
	})
}

// resolveSkipped answers a waiting Call whose answer was a line skipped unread (why says
// which: longer than MaxLine, or no room in AnswerBudget): the server did answer (it may have
// run the call), so the call must not wait for ever. The Call fails as in resolveInvalid. It
// reports whether id named a waiting call.
func (s *Session) resolveSkipped(id json.RawMessage, why string) bool {
	return s.failWaiting(id, func() error {
		return fmt.Errorf("MCP server %s answered request %s with %s, which was skipped unread", s.name(), id, why)
	})
}

// failWaiting fails the Call waiting for id, if one is, with the error why makes (logged),
// reporting whether one was.
func (s *Session) failWaiting(id json.RawMessage, why func() error) bool {
	s.mu.Lock()
	_, waiting := s.pending[jsonrpc.IDKey(id)]
	s.mu.Unlock()
	if !waiting {
		return false
	}
	err := why()
	s.logf("%v", err)
	s.resolve(id, reply{err: err})
	return true
}

// resolve hands a response to its Call: at once when everything read before it has been
// delivered, else through the delivery queue, behind what the child wrote before it. The
// call is taken out of pending here, so a session that ends meanwhile does not fail a call
// whose answer was already read.
func (s *Session) resolve(id json.RawMessage, r reply) {
	key := jsonrpc.IDKey(id) // as Call keys it
	s.mu.Lock()
	ch, ok := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	if !ok {
		s.answers.Release(r.held)
		s.logf("MCP server %s answered request id %s that is not waiting; ignored", s.name(), jsonrpc.LogID(id))
		return
	}
	// Only the reader adds to backlog, so zero here means nothing read before is undelivered.
	if s.backlog.Load() == 0 {
		ch <- r
		return
	}
	s.queue(note{to: ch, r: r})
}

// deliver works through the queue in order until the reader closes it.
func (s *Session) deliver() {
	defer close(s.notesEnd)
	for n := range s.notes {
		switch {
		case n.to != nil:
			n.to <- n.r // buffered, and each call is resolved once: never blocks
		case n.long != nil:
			s.refuseLong(n.long, n.why)
		case n.req != nil:
			// Registered here, in order, so a cancellation the child writes after its
			// request finds it.
			ctx, cancel := context.WithCancelCause(s.reqCtx)
			end, ok := s.inbound.Begin(n.req.ID, cancel)
			if !ok {
				cancel(nil)
				s.refuse(n.req) // here: a child that does not read its stdin slows only itself
				break
			}
			go func(m *jsonrpc.Message, held int64) {
				defer func() {
					end()
					cancel(nil)
					s.answers.Release(held)
				}()
				s.answer(ctx, m)
			}(n.req, n.held)
			n.held = 0 // the request's goroutine gives it back
		case n.method == "notifications/cancelled":
			// A server cancels only its own requests: the handler's context ends (if it still
			// runs). The notification names the child's id, which means nothing to anyone else,
			// so it goes no further.
			s.cancelInbound(n.params)
		case s.cfg.OnNotification != nil:
			s.cfg.OnNotification(n.method, n.params)
		}
		s.answers.Release(n.held)
		s.backlog.Add(-1)
	}
}

// cancelInbound cancels the request of the child that params (of notifications/cancelled)
// names, reporting whether it named one still being answered.
func (s *Session) cancelInbound(params json.RawMessage) bool {
	return s.inbound.Cancel(params, func(reason string) error { return &CancelReason{Reason: reason} })
}

// refuse answers a request of the child with an error at once: MaxInbound of its requests
// are waiting for their answers already.
func (s *Session) refuse(m *jsonrpc.Message) {
	line := jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("effectfence: %d requests of this server are waiting for the client already; this one is refused", MaxInbound)})
	if err := s.out.Write(line); err != nil && s.Err() == nil {
		s.logf("cannot refuse a %s request of MCP server %s: %v", m.Method, s.name(), err)
	}
}

// refuseLong answers a request of the child that was skipped unread (why: longer than
// MaxLine, or no room in AnswerBudget) with an error under its id.
func (s *Session) refuseLong(id json.RawMessage, why string) {
	line := jsonrpc.ErrorResponse(id, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "effectfence: a request in " + why + " is refused unread"})
	if err := s.out.Write(line); err != nil && s.Err() == nil {
		s.logf("cannot refuse request %s of MCP server %s: %v", jsonrpc.LogID(id), s.name(), err)
	}
}

func (s *Session) answer(ctx context.Context, m *jsonrpc.Message) {
	// What the answer holds of a budget (the client's answer read by a proxy, say) is kept
	// until it is written.
	ctx, done := budget.Hold(ctx)
	defer done()
	var (
		res json.RawMessage
		err error
	)
	switch {
	case m.Method == "ping":
		res = json.RawMessage("{}")
	case s.cfg.OnRequest != nil:
		res, err = s.cfg.OnRequest(ctx, m.Method, m.Params)
	default:
		err = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not supported by this client: " + m.Method}
	}
	var why *CancelReason
	if errors.As(context.Cause(ctx), &why) {
		return // the child cancelled its request: MCP says no answer is sent
	}
	var line []byte
	switch e := err.(type) {
	case nil:
		if len(res) == 0 || !json.Valid(res) {
			res = json.RawMessage("{}")
		}
		line = jsonrpc.Response(m.ID, res)
	case *jsonrpc.Error:
		line = jsonrpc.ErrorResponse(m.ID, e)
	default:
		line = jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: e.Error()})
	}
	if werr := s.out.Write(line); werr != nil && s.Err() == nil {
		s.logf("cannot answer %s request of MCP server %s: %v", m.Method, s.name(), werr)
	}
}

// maxStderrLine bounds a line of the child's stderr held back until its end.
const maxStderrLine = 64 << 10

// maxHidden bounds the bytes of the texts a session hides (Session.Hide).
const maxHidden = 1 << 20

// tailWriter copies the child's stderr to w in whole lines, one write for each run of whole
// lines (a writer shared by several children so never gets half a line of one followed by
// another's), and keeps the last max bytes, which String gives with the hidden texts taken
// out.
type tailWriter struct {
	w    io.Writer
	max  int
	mu   sync.Mutex
	buf  []byte
	cut  bool   // buf lost what came before it
	line []byte // what followed the last newline
	// hidden are the texts to take out of the tail (longest first), seen the same set;
	// tooMany says more were given than maxHidden bytes: the tail is not shown at all.
	hidden      []string
	seen        map[string]bool
	hiddenBytes int
	tooMany     bool
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	t.line = append(t.line, p...)
	if i := bytes.LastIndexByte(t.line, '\n'); i >= 0 {
		_, _ = t.w.Write(t.line[:i+1]) // an error: our stderr is gone; keep draining the child so it never blocks
		t.line = t.line[:copy(t.line, t.line[i+1:])]
	}
	for len(t.line) >= maxStderrLine {
		_, _ = t.w.Write(append(t.line[:maxStderrLine:maxStderrLine], '\n'))
		t.line = t.line[:copy(t.line, t.line[maxStderrLine:])]
	}
	return len(p), nil
}

// flush writes a last line that did not end in a newline, ending it.
func (t *tailWriter) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.line) > 0 {
		_, _ = t.w.Write(append(t.line, '\n'))
		t.line = t.line[:0]
	}
}

// hide adds texts to those taken out of the tail.
func (t *tailWriter) hide(texts []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var added []string
	for _, x := range texts {
		if x == "" || t.seen[x] {
			continue
		}
		if t.hiddenBytes += len(x); t.hiddenBytes > maxHidden {
			t.tooMany, t.hidden, t.seen = true, nil, nil
			return
		}
		if t.seen == nil {
			t.seen = map[string]bool{}
		}
		t.seen[x] = true
		added = append(added, x)
	}
	if len(added) == 0 {
		return
	}
	// Longest first, merged in one pass. Each text inserted at its place shifted every text
	// of its length after it: one call's 170,000 distinct numbers (1 MB) took 27 s, with the
	// lock held, so the child's stderr went unread (TestTailTakesManyTextsAtOnce).
	longestFirst := func(a, b string) int { return len(b) - len(a) }
	slices.SortStableFunc(added, longestFirst)
	merged := make([]string, 0, len(t.hidden)+len(added))
	i, j := 0, 0
	for i < len(t.hidden) && j < len(added) {
		if longestFirst(added[j], t.hidden[i]) < 0 {
			merged, j = append(merged, added[j]), j+1
		} else {
			merged, i = append(merged, t.hidden[i]), i+1
		}
	}
	t.hidden = append(append(merged, t.hidden[i:]...), added[j:]...)
}

// String is the tail, with the hidden texts taken out: also in part at its start, when the
// tail lost the beginning of a value, and at its end, when the child stopped half way through
// writing one.
func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.tooMany:
		return fmt.Sprintf("(%d bytes, not shown: more argument values to keep out of it were sent to this server than are kept)", len(t.buf))
	case len(t.hidden) > 0:
		return hide.Edges(string(t.buf), t.hidden, t.cut)
	}
	return string(t.buf)
}

func (t *tailWriter) suffix() string {
	if s := strings.TrimSpace(t.String()); s != "" {
		return "; its stderr ended with: " + s
	}
	return ""
}

// Child is a restartable child: Session returns the live session and starts the process
// again (with the same Config, so the same handshake) after the previous one ended.
type Child struct {
	cfg   Config
	start chan struct{} // held while starting, so one start runs at a time

	mu       sync.Mutex // guards the fields below; never held while starting
	cur      *Session
	starting *Session // the session being started (its handshake in progress), if any
	stopping *Session // the session Close or Kill ended
	starts   int
	lastErr  error
	lastAt   time.Time
	closed   bool
}

// RestartBackoff is how long Child.Session keeps returning a failed start's error before it
// tries to start the child again, so a child that dies at start is not respawned in a loop.
const RestartBackoff = time.Second

// NewChild returns a Child that starts cfg on first use.
func NewChild(cfg Config) *Child {
	return &Child{cfg: cfg, start: make(chan struct{}, 1)}
}

// Session returns the live session, starting the child if none is running. A start that
// failed less than RestartBackoff ago returns its error again without a new attempt.
func (c *Child) Session(ctx context.Context) (*Session, error) {
	if s := c.Current(); s != nil {
		return s, nil
	}
	select {
	case c.start <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
	}
	defer func() { <-c.start }()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: mcpstdio: child closed", ErrNotSent)
	}
	if c.cur != nil && c.cur.Err() == nil { // started while we waited
		s := c.cur
		c.mu.Unlock()
		return s, nil
	}
	old := c.cur
	c.cur = nil
	if c.lastErr != nil && time.Since(c.lastAt) < RestartBackoff {
		err := c.lastErr
		c.mu.Unlock()
		return nil, err
	}
	c.starts++
	c.mu.Unlock()
	if old != nil {
		_ = old.Close() // reap the old process
	}
	s, err := start(ctx, c.cfg, func(s *Session) {
		c.mu.Lock()
		c.starting = s
		c.mu.Unlock()
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starting = nil
	if err != nil {
		c.lastErr, c.lastAt = fmt.Errorf("%w: %w", ErrNotSent, err), time.Now()
		return nil, c.lastErr
	}
	if c.closed { // closed while starting
		go s.Close()
		return nil, fmt.Errorf("%w: mcpstdio: child closed", ErrNotSent)
	}
	c.lastErr, c.cur = nil, s
	return s, nil
}

// Current returns the live session, or nil when none is running; it never starts one and
// never waits for a start in progress.
func (c *Child) Current() *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && c.cur.Err() == nil {
		return c.cur
	}
	return nil
}

// Starts is how many times the child was started.
func (c *Child) Starts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts
}

// Close closes the live session, if any; later Session calls fail.
func (c *Child) Close() error { return c.closeWith((*Session).Close) }

// CloseWithin is Close with a total budget (see Session.CloseWithin).
func (c *Child) CloseWithin(within time.Duration) error {
	return c.closeWith(func(s *Session) error { return s.CloseWithin(within) })
}

// Kill kills the live session's process group at once (see Session.Kill); later Session calls
// fail.
func (c *Child) Kill() error { return c.closeWith((*Session).Kill) }

func (c *Child) closeWith(stop func(*Session) error) error {
	c.mu.Lock()
	c.closed = true
	s := c.cur
	if s == nil {
		// A child still in its handshake is stopped too: its start then fails. Before
		// 2026-12-04 it was not reached, and ran on until its initialize was answered or timed
		// out (--init-timeout), past a Kill and its parent's exit.
		s = c.starting
	}
	if s == nil {
		s = c.stopping // a Kill while a Close waits must still reach the process
	}
	c.cur, c.stopping = nil, s
	c.mu.Unlock()
	if s != nil {
		return stop(s)
	}
	return nil
}
