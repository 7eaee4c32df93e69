package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/budget"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// Tool calls are scheduled here, not on mcp-go's single worker pool: with one pool, 32
// prepares waiting for a holder fill every worker, the holder's fence_commit queues behind
// them, its lease lapses and the waiters' wait ends on a lapsed claim. Each tool call instead
// goes to one of three lanes, each with its own Workers slots:
//
//   - settle: fence_commit, fence_release, fence_abort, fence_heartbeat. What a waiter waits
//     for, so nothing that waits may hold one of its slots.
//   - wait: fence_prepare with wait_secs > 0. Its waits end when the caller hangs up, when
//     wait_secs runs out, or when the claim they wait on is settled or lapses (the engine
//     looks again at least every 100 ms, or 1 s with a notifying store).
//   - call: every other tool call (a prepare without waiting, fence_status, fence_stats):
//     one ledger transaction each.
//
// A lane's calls take its slots in the order they came: up to Queue of them wait in line
// for a slot (a lane's dispatcher hands the slots out), and beyond that the reader waits for
// room in the line (back-pressure on the client). Other messages (initialize,
// tools/list, ping, notifications) are left to mcp-go's stdio server, which reads them from a
// pipe this router feeds.

type lane int

const (
	laneCall lane = iota
	laneWait
	laneSettle
	lanes
)

var laneNames = [lanes]string{"call", "wait", "settle"}

// classify returns the lane of a tools/call message, or false for any other message, and
// whether its id is null or missing (noID: such a call is not run, see Serve).
func classify(line []byte) (l lane, noID idless, ok bool) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string `json:"name"`
			Arguments struct {
				WaitSecs any `json:"wait_secs"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil || m.Method != string(mcp.MethodToolsCall) {
		// Unparseable lines go to mcp-go too, which answers them with a parse error.
		var probe struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(line, &probe) == nil && probe.Method == string(mcp.MethodToolsCall) {
			return laneCall, idlessOf(probe.ID), true // a tools/call with odd arguments: the tool refuses it
		}
		return 0, 0, false
	}
	noID = idlessOf(m.ID)
	switch m.Params.Name {
	case ToolCommit, ToolRelease, ToolAbort, ToolHeartbeat:
		return laneSettle, noID, true
	case ToolPrepare:
		if w, ok := m.Params.Arguments.WaitSecs.(float64); ok && w > 0 {
			return laneWait, noID, true
		}
	}
	return laneCall, noID, true
}

// idless says whether a request's id is missing, null or of a type MCP does not allow. mcp-go
// takes a missing or null id for a notification and neither runs nor answers it, so a
// tools/call so sent would wait for ever; it runs one whose id is true or an object.
type idless int

const (
	hasID  idless = iota
	nullID        // "id": null: answered with an error under id null (MCP: never null)
	noID          // no id: a notification, which nothing may answer; logged
	badID         // "id": true, false, an object or an array: answered like nullID
)

func idlessOf(id json.RawMessage) idless {
	switch {
	case id == nil:
		return noID
	case string(id) == "null":
		return nullID
	case id[0] == '"' || id[0] == '-' || (id[0] >= '0' && id[0] <= '9'):
		return hasID
	}
	return badID
}

// lineWriter serialises whole lines to the client: mcp-go's writes and the lanes' writes share
// it, and each Write is one complete message.
type lineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	ids *ids // puts back the ids the router replaced
}

func (l *lineWriter) Write(p []byte) (int, error) {
	if _, err := l.writeLine(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeLine writes p, one whole message, and returns how many of its bytes (as sent, its id
// put back) reached the client's pipe: 0 with an error means the client received none of it.
func (l *lineWriter) writeLine(p []byte) (int, error) {
	out := l.ids.unwrap(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(out)
}

type scheduler struct {
	s        *Server
	requests *budget.Pool // RequestBudget, as it was when Serve began
	out      *lineWriter
	ctx      context.Context // carries mcp-go's stdio session
	slots    [lanes]chan struct{}
	line     [lanes]chan queuedCall // a lane's calls waiting for a slot, first come first
	wg       sync.WaitGroup

	// waiting holds the tool calls queued for a slot, by the jsonrpc.IDKey of their id as the
	// router passes them on (its surrogate, see ids); a notifications/cancelled naming one
	// marks it, and it runs cancelled when its slot comes (see handle). mcp-go knows a call only once it runs and ignores a cancellation of
	// one it does not know: a fence_prepare cancelled while queued ran later and its fresh
	// ticket went to a client that had dropped the request, so the claim stayed in flight,
	// then unknown.
	waitMu  sync.Mutex
	waiting map[string]*bool
}

// queue notes msg, a tool call about to wait for a slot, and returns its mark (nil when msg
// has no single id).
func (sc *scheduler) queue(msg []byte) (key string, mark *bool) {
	start, end, n, _ := jsonrpc.Member(msg, "id")
	if n != 1 {
		return "", nil
	}
	key, mark = jsonrpc.IDKey(msg[start:end]), new(bool)
	sc.waitMu.Lock()
	defer sc.waitMu.Unlock()
	if sc.waiting == nil {
		sc.waiting = map[string]*bool{}
	}
	if _, dup := sc.waiting[key]; dup {
		return "", nil // two queued calls under one id: a cancellation names neither for sure
	}
	sc.waiting[key] = mark
	return key, mark
}

// dequeue forgets a queued call as its slot comes, and says whether it was cancelled.
func (sc *scheduler) dequeue(key string, mark *bool) bool {
	if mark == nil {
		return false
	}
	sc.waitMu.Lock()
	defer sc.waitMu.Unlock()
	delete(sc.waiting, key)
	return *mark
}

// cancelQueued marks the queued call a notifications/cancelled names (line, as mcp-go will
// see it: its requestId is the router's surrogate if the call's id was replaced).
func (sc *scheduler) cancelQueued(line []byte) {
	sc.waitMu.Lock()
	none := len(sc.waiting) == 0
	sc.waitMu.Unlock()
	if none || !bytes.Contains(line, []byte("notifications/cancelled")) || !isObject(line) {
		return // cancelTarget needs one valid JSON object
	}
	rs, re, ok := cancelTarget(line)
	if !ok {
		return
	}
	sc.waitMu.Lock()
	defer sc.waitMu.Unlock()
	if mark, ok := sc.waiting[jsonrpc.IDKey(line[rs:re])]; ok {
		*mark = true
	}
}

// queuedCall is a tool call waiting in its lane's line: msg, the room it holds of the request
// budget, and its cancellation mark (see queue).
type queuedCall struct {
	msg  []byte
	held int64
	key  string
	mark *bool
	// noWait: a fence_prepare with wait_secs the wait lane had no room for, run in the call
	// lane without waiting (see run).
	noWait bool
}

// run puts one tool call in its lane's line; msg is the router's to give. It returns once the
// call is in line, waiting while the line is full. The room msg holds of the request budget
// (held) is given back once the call is answered.
func (sc *scheduler) run(l lane, msg []byte, held int64) {
	c := queuedCall{msg: msg, held: held}
	if l != laneSettle { // settling calls run detached from cancellation anyway
		c.key, c.mark = sc.queue(msg)
	}
	if l == laneWait {
		select {
		case sc.line[l] <- c:
			return
		default:
			// The wait lane's line is full. Waiting here for room would stop the reader, and
			// with it the settling call (fence_commit) the waiters wait for, until a wait
			// ends: no sooner than the lease lapses. The prepare is asked without waiting
			// instead (wait_secs is "up to"): intent_in_flight at once, or the cert.
			c.noWait = true
			l = laneCall
		}
	}
	sc.line[l] <- c
}

// dispatch hands lane l's slots to the calls in its line, in the order they came, until the
// line is closed and empty (Serve closes it once its router stops).
func (sc *scheduler) dispatch(l lane) {
	defer sc.wg.Done()
	for c := range sc.line[l] {
		sc.slots[l] <- struct{}{}
		cancelled := sc.dequeue(c.key, c.mark)
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			defer func() { <-sc.slots[l] }()
			defer sc.requests.Release(c.held)
			sc.handle(l, c.msg, cancelled, c.noWait)
		}()
	}
}

// handle answers msg in lane l. A call its client cancelled while it was queued (cancelled)
// runs with its context already cancelled: fence_prepare then answers with the cancellation
// without asking the ledger (tools.go), and other tools end as for a cancellation once run.
func (sc *scheduler) handle(l lane, msg []byte, cancelled, noWait bool) {
	var handed handedTicket
	ctx := context.WithValue(sc.ctx, handedKey{}, &handed)
	if noWait {
		ctx = context.WithValue(ctx, noWaitKey{}, true)
	}
	if cancelled {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.WithValue(ctx, cancelledQueuedKey{}, true))
		cancel()
	}
	b := sc.answer(ctx, l, msg)
	if b == nil {
		return
	}
	n, err := sc.out.writeLine(append(b, '\n'))
	if err == nil {
		return
	}
	sc.s.opts.Log.Printf("writing a tool response: %v", err)
	if handed.t != nil && n == 0 {
		// The answer carrying a fresh ticket reached nobody (the client closed the pipe it
		// reads answers from): nothing can run under that ticket, and the claim would stay in
		// flight, then unknown, fenced for an operator. Released, as for a cancelled request.
		t := *handed.t
		if _, rerr := sc.s.settle(context.Background(), fence.Outcome{Kind: fence.OutcomeRelease, Ticket: t, Reason: undeliveredTicket}); rerr != nil {
			sc.s.opts.Log.Printf("releasing %q, whose ticket could not be written to the client: %v", t.Intent, rerr)
			return
		}
		sc.s.opts.Log.Printf("released %q: its ticket could not be written to the client, so nothing ran", t.Intent)
	}
}

// noWaitKey marks the context of a fence_prepare that must not wait, whatever its wait_secs:
// the wait lane had no room for it (scheduler.run).
type noWaitKey struct{}

// handedTicket is where fence_prepare puts the fresh ticket it answers with, so the lane that
// writes the answer can release the claim if the answer reaches nobody.
type handedTicket struct{ t *fence.Ticket }

// handedKey marks a request context carrying a *handedTicket.
type handedKey struct{}

// undeliveredTicket is the release reason of a claim whose ticket could not be written to the
// client at all.
const undeliveredTicket = "the answer carrying this claim's ticket could not be written to the client (it had closed the pipe serve answers on), so nobody received the ticket: nothing ran"

// answer is mcp-go's response to msg, encoded, or nil for none. A handler that panics is
// answered with an internal error under msg's id as the client wrote it (or the surrogate
// the router put in its place): never decoded into a Go value, which would round a number.
func (sc *scheduler) answer(ctx context.Context, l lane, msg []byte) (b []byte) {
	defer func() {
		if r := recover(); r != nil {
			sc.s.opts.Log.Printf("panic in a %s-lane tool call: %v", laneNames[l], r)
			b = jsonrpc.ErrorResponse(jsonrpc.ReadableID(msg), &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("internal panic: %v", r)})
		}
	}()
	resp := sc.s.mcp.HandleMessage(ctx, msg)
	if e, ok := resp.(mcp.JSONRPCError); ok && e.Error.Code == mcp.INVALID_REQUEST {
		// mcp-go decodes arguments into Go values before any handler runs, and refuses a
		// number beyond float64 (1e400), which the fence keeps exactly: without this a
		// holder could never commit a result holding one. The arguments go round mcp-go.
		if stripped, args, ok := withoutArguments(msg); ok {
			resp = sc.s.mcp.HandleMessage(context.WithValue(ctx, rawArgumentsKey{}, args), stripped)
		}
	}
	if resp == nil {
		return nil
	}
	b, err := json.Marshal(resp)
	if err != nil {
		sc.s.opts.Log.Printf("encoding a tool response: %v", err)
		return nil
	}
	return b
}

// line is one line of the client's (newline included) and the room it holds of the request
// budget, which whoever handles it gives back.
type line struct {
	b    []byte
	held int64
}

// readLines sends each line of in (newline included) to lines until in ends; then it sends
// the error (io.EOF at the end) to done. A line longer than max bytes is not kept: reading
// it costs at most max bytes of memory, the client gets an error response on out (under the
// request's id, read as the line went by, or null when it has none that can be read), and
// reading goes on after it. A line longer than FreeMessage takes room in pool (RequestBudget)
// first, waiting up to wait or until ctx ends; one that finds none is likewise refused unread.
func readLines(ctx context.Context, in io.Reader, max int, pool *budget.Pool, wait time.Duration, out io.Writer, lines chan<- line, done chan<- error, stop <-chan struct{}) {
	r := jsonrpc.NewReader(in, max)
	r.Meter(ctx, pool, FreeMessage, wait)
	for {
		b, err := r.ReadLine()
		if err == jsonrpc.ErrTooLong || err == jsonrpc.ErrNoRoom {
			e := &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("message longer than %d bytes refused", max)}
			if err == jsonrpc.ErrNoRoom {
				e = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("effectfence serve: the large messages this server holds filled its memory budget (%d MiB) and none ended within %s, so this message was skipped unread: nothing ran; send it again", pool.Total()>>20, wait)}
			}
			msg := jsonrpc.ErrorResponse(r.SkippedRequestID(), e)
			if _, err := out.Write(append(msg, '\n')); err != nil {
				done <- err
				return
			}
			continue
		}
		if err != nil {
			done <- err
			return
		}
		select {
		case lines <- line{append(b, '\n'), r.Held()}:
		case <-stop:
			pool.Release(r.Held())
			return
		}
	}
}

// rawArgumentsKey marks a context carrying a tools/call's arguments that mcp-go was not shown
// (withoutArguments).
type rawArgumentsKey struct{}

// withoutArguments returns msg, a tools/call, with params.arguments replaced by {}, and the
// arguments it held, when they are what mcp-go cannot decode into Go values (a number beyond
// float64's range). It declines a message it cannot read, one whose arguments decode, and one
// with another member that encoding/json would also take for arguments ("Arguments"): what
// mcp-go then answers stands.
func withoutArguments(msg []byte) ([]byte, json.RawMessage, bool) {
	var m map[string]json.RawMessage
	var params map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil || json.Unmarshal(m["params"], &params) != nil {
		return nil, nil, false
	}
	args, ok := params["arguments"]
	if !ok || json.Unmarshal(args, new(any)) == nil {
		return nil, nil, false
	}
	for k := range params {
		if k != "arguments" && strings.EqualFold(k, "arguments") {
			return nil, nil, false
		}
	}
	params["arguments"] = json.RawMessage("{}")
	p, err := json.Marshal(params)
	if err != nil {
		return nil, nil, false
	}
	m["params"] = p
	out, err := json.Marshal(m)
	if err != nil {
		return nil, nil, false
	}
	return out, args, true
}
