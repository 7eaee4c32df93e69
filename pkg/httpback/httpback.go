// Package httpback talks to a remote MCP server over Streamable HTTP, as the back of the proxy
// core (docs/proxy-core.md) and as a client for tests: it performs the initialize handshake
// with the params the caller forwards, POSTs each request and reads its answer (a JSON body or
// an SSE stream of notifications, server requests and finally the response), answers the
// server's requests, listens on the GET stream when the server offers one, and ends the
// session with DELETE.
//
// Results are the exact bytes the server sent (json.RawMessage).
//
// What a caller can rely on when a call fails (docs/gateway-backend.md):
//   - errors.Is(err, mcpstdio.ErrNotSent): the request definitely did not reach the server's
//     MCP handling: the connection could not be made or failed before any byte of the request
//     was written, or the server answered 404 to the session id (it no longer knows the
//     session, so it ran nothing; the next Session starts a new one).
//   - *jsonrpc.Error: the server answered with a JSON-RPC error, or refused the request with
//     an HTTP 4xx other than 404 and 408 (nothing ran).
//   - anything else (5xx, 408, a reset or timeout after the request was written, an SSE
//     stream cut before the response, an unreadable answer): it may have run.
//
// Nothing is retried: a request is written at most once (Go's transport re-sends a request
// only when it wrote nothing of it on a reused connection, which the server never saw).
//
// Order: notifications the server put on a call's stream before the response are delivered
// (Config.OnNotification returned) before Call returns, one at a time on one goroutine per
// session, together with those of the GET stream; a request of the server is handed to
// Config.OnRequest, on its own goroutine, once what came before it was delivered.
package httpback

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Defaults and bounds.
const (
	DefaultInitTimeout = 30 * time.Second
	// MaxMessage bounds one message from the server (64 MiB, as mcpstdio.MaxLine).
	MaxMessage = 64 << 20
	// RestartBackoff is how long Session keeps returning a failed connect's error before it
	// tries again.
	RestartBackoff = time.Second
	// closeBudget bounds the DELETE that ends a session.
	closeBudget = 2 * time.Second
)

// Config says where the server is and how to handle what it sends.
type Config struct {
	// URL is the server's MCP endpoint. Required.
	URL string
	// Header is sent with every request (e.g. a client's Authorization passed through). Its
	// values are never logged.
	Header http.Header
	// Init is the initialize params, sent as given; empty means mcpstdio.DefaultInit.
	Init json.RawMessage
	// InitTimeout bounds the handshake (default DefaultInitTimeout).
	InitTimeout time.Duration
	// OnNotification receives each notification, in order, on one goroutine of the session;
	// it must not wait for a Call of the same session (see the package comment).
	OnNotification func(method string, params json.RawMessage)
	// OnRequest answers a request of the server (sampling, elicitation, roots); nil answers
	// every request but ping with "method not found". Its context ends when the server cancels
	// the request or the session ends.
	OnRequest func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	// Log receives diagnostics (lines starting "httpback:"). Nil discards them.
	Log io.Writer
	// Client makes the requests (default: one with a 10 s dial timeout and no overall timeout,
	// since a call may take minutes).
	Client *http.Client
}

func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t}
}

// Upstream is a restartable connection to one server: Session connects (initialize) on first
// use and again after the session was lost.
type Upstream struct {
	cfg   Config
	start chan struct{} // held while connecting

	mu      sync.Mutex
	cur     *Session
	closed  bool
	lastErr error
	lastAt  time.Time
}

// NewUpstream returns an Upstream for cfg; nothing is sent until Session.
func NewUpstream(cfg Config) *Upstream {
	if cfg.Client == nil {
		cfg.Client = defaultClient()
	}
	if cfg.InitTimeout <= 0 {
		cfg.InitTimeout = DefaultInitTimeout
	}
	if len(cfg.Init) == 0 {
		cfg.Init = mcpstdio.DefaultInit("effectfence", "1")
	}
	return &Upstream{cfg: cfg, start: make(chan struct{}, 1)}
}

// Session returns the live session, connecting first if none is.
func (u *Upstream) Session(ctx context.Context) (*Session, error) {
	if s := u.Current(); s != nil {
		return s, nil
	}
	select {
	case u.start <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, ctx.Err())
	}
	defer func() { <-u.start }()
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, fmt.Errorf("%w: httpback: closed", mcpstdio.ErrNotSent)
	}
	if u.cur != nil && u.cur.Err() == nil {
		s := u.cur
		u.mu.Unlock()
		return s, nil
	}
	if u.lastErr != nil && time.Since(u.lastAt) < RestartBackoff {
		err := u.lastErr
		u.mu.Unlock()
		return nil, err
	}
	old := u.cur
	u.cur = nil
	u.mu.Unlock()
	if old != nil {
		old.end(errors.New("replaced"), false)
	}
	s, err := connect(ctx, u.cfg)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		u.lastErr, u.lastAt = fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, err), time.Now()
		return nil, u.lastErr
	}
	if u.closed {
		go s.end(errors.New("httpback: closed"), true)
		return nil, fmt.Errorf("%w: httpback: closed", mcpstdio.ErrNotSent)
	}
	u.cur, u.lastErr = s, nil
	return s, nil
}

// Current returns the live session, or nil; it never connects.
func (u *Upstream) Current() *Session {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cur != nil && u.cur.Err() == nil {
		return u.cur
	}
	return nil
}

// Close ends the session (DELETE) and fails what waits in it; later Session calls fail.
func (u *Upstream) Close() error { return u.CloseWithin(closeBudget) }

// CloseWithin is Close with a budget for the DELETE.
func (u *Upstream) CloseWithin(within time.Duration) error {
	s := u.shut()
	if s != nil {
		s.endWithin(errors.New("httpback: closed"), within)
	}
	return nil
}

// Kill ends the session at once, without telling the server; later Session calls fail.
func (u *Upstream) Kill() error {
	if s := u.shut(); s != nil {
		s.end(errors.New("httpback: killed"), false)
	}
	return nil
}

func (u *Upstream) shut() *Session {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	s := u.cur
	u.cur = nil
	return s
}

// Session is one MCP session with the server, after its handshake. Safe for concurrent use.
type Session struct {
	cfg    Config
	url    string
	sid    string // Mcp-Session-Id; "" for a server without sessions
	proto  string // the negotiated protocol version
	init   json.RawMessage
	nextID atomic.Int64

	ctx    context.Context // ends with the session: stops the GET stream and the handlers
	cancel context.CancelFunc

	notes    chan note // delivery queue, in the server's order
	notesEnd chan struct{}

	mu      sync.Mutex
	err     error
	done    chan struct{}
	inbound map[string]context.CancelCauseFunc // the server's requests being answered
}

type note struct {
	method  string
	params  json.RawMessage
	req     *jsonrpc.Message
	barrier chan struct{}
}

// InitResult is the server's initialize result, as sent.
func (s *Session) InitResult() json.RawMessage { return s.init }

// ID is the session's Mcp-Session-Id ("" when the server keeps none).
func (s *Session) ID() string { return s.sid }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended, or nil while it is live.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Session) logf(format string, a ...any) {
	if s.cfg.Log != nil {
		fmt.Fprintln(s.cfg.Log, "httpback: "+safetext.Escape(fmt.Sprintf(format, a...)))
	}
}

func connect(ctx context.Context, cfg Config) (*Session, error) {
	sctx, cancel := context.WithCancel(context.Background())
	s := &Session{cfg: cfg, url: cfg.URL, ctx: sctx, cancel: cancel, notes: make(chan note, 256), notesEnd: make(chan struct{}), done: make(chan struct{}), inbound: map[string]context.CancelCauseFunc{}}
	go s.deliver()
	ictx, icancel := context.WithTimeout(ctx, cfg.InitTimeout)
	defer icancel()
	res, hdr, err := s.roundTrip(ictx, "initialize", cfg.Init, true)
	if err != nil {
		s.end(err, false)
		return nil, fmt.Errorf("initialize: %w", err)
	}
	s.init = res
	s.sid = hdr.Get("Mcp-Session-Id")
	var ir struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(res, &ir)
	s.proto = ir.ProtocolVersion
	if err := s.Notify("notifications/initialized", nil); err != nil {
		s.end(err, true)
		return nil, fmt.Errorf("notifications/initialized: %w", err)
	}
	go s.listen()
	return s, nil
}

// end ends the session once: calls waiting fail, handlers' contexts end; with tell, the
// server is told (DELETE) within closeBudget.
func (s *Session) end(err error, tell bool) {
	if tell {
		s.endWithin(err, closeBudget)
		return
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	close(s.done)
	s.mu.Unlock()
	s.cancel()
}

func (s *Session) endWithin(err error, within time.Duration) {
	s.mu.Lock()
	already := s.err != nil
	s.mu.Unlock()
	if !already && s.sid != "" && within > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		req, rerr := http.NewRequestWithContext(ctx, http.MethodDelete, s.url, nil)
		if rerr == nil {
			s.headers(req)
			if resp, derr := s.cfg.Client.Do(req); derr == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
				resp.Body.Close()
			}
		}
		cancel()
	}
	s.end(err, false)
}

func (s *Session) headers(req *http.Request) {
	for k, vs := range s.cfg.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if s.sid != "" {
		req.Header.Set("Mcp-Session-Id", s.sid)
	}
	if s.proto != "" {
		req.Header.Set("MCP-Protocol-Version", s.proto)
	}
}

// Call sends one request and returns the server's exact result bytes (see the package
// comment for the errors). When ctx ends first, the server is sent notifications/cancelled
// for the request and ctx's error is returned: the request may still run.
func (s *Session) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, err)
	}
	res, _, err := s.roundTrip(ctx, method, params, false)
	return res, err
}

// roundTrip POSTs one request and reads its answer.
func (s *Session) roundTrip(ctx context.Context, method string, params json.RawMessage, initialize bool) (json.RawMessage, http.Header, error) {
	id := json.RawMessage(strconv.FormatInt(s.nextID.Add(1), 10))
	body := jsonrpc.Request(id, method, params)
	// The request is tied to the session too: a killed session abandons it.
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	stop := context.AfterFunc(s.ctx, rcancel)
	defer stop()
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, trace), http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, err)
	}
	s.headers(req)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		if !wrote.Load() {
			return nil, nil, fmt.Errorf("%w: %s %s: %w", mcpstdio.ErrNotSent, method, s.url, err)
		}
		return nil, nil, s.abandoned(ctx, id, fmt.Errorf("%s: the request was sent and the connection failed: %w", method, err))
	}
	defer resp.Body.Close()
	if err := s.status(resp, initialize); err != nil {
		return nil, resp.Header, err
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		res, err := s.readStream(ctx, resp.Body, id)
		if err != nil {
			return nil, resp.Header, s.abandoned(ctx, id, fmt.Errorf("%s: %w", method, err))
		}
		return res, resp.Header, nil
	case strings.HasPrefix(ct, "application/json"):
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxMessage+1))
		if err != nil {
			return nil, resp.Header, s.abandoned(ctx, id, fmt.Errorf("%s: reading the answer: %w", method, err))
		}
		if len(b) > MaxMessage {
			return nil, resp.Header, fmt.Errorf("%s: the answer is longer than %d bytes", method, MaxMessage)
		}
		res, err := answerOf(b, id)
		return res, resp.Header, err
	}
	return nil, resp.Header, fmt.Errorf("%s: the server answered HTTP %d with Content-Type %q, neither JSON nor an event stream", method, resp.StatusCode, ct)
}

// abandoned returns err, after telling the server the request is cancelled when ctx ended.
func (s *Session) abandoned(ctx context.Context, id json.RawMessage, err error) error {
	if ctx.Err() == nil {
		return err
	}
	why := ""
	var cr *mcpstdio.CancelReason
	if errors.As(context.Cause(ctx), &cr) {
		why = cr.Reason
	}
	p := map[string]any{"requestId": id}
	if why != "" {
		p["reason"] = why
	}
	params, _ := json.Marshal(p)
	if nerr := s.Notify("notifications/cancelled", params); nerr != nil {
		s.logf("telling the server about a cancelled request: %v", nerr)
	}
	return ctx.Err()
}

// status turns an HTTP status that is not 200 into the error it means.
func (s *Session) status(resp *http.Response, initialize bool) error {
	code := resp.StatusCode
	if code == http.StatusOK {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	switch {
	case code == http.StatusNotFound && s.sid != "" && !initialize:
		s.end(fmt.Errorf("the server no longer knows session %s (HTTP 404)", short(s.sid)), false)
		return fmt.Errorf("%w: the server no longer knows the session (HTTP 404); a new one is started for the next request", mcpstdio.ErrNotSent)
	case code >= 400 && code < 500 && code != http.StatusRequestTimeout:
		var m struct {
			Error *jsonrpc.Error `json:"error"`
		}
		if json.Unmarshal(b, &m) == nil && m.Error != nil {
			return m.Error
		}
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("the server refused the request: HTTP %d %s", code, oneLine(b))}
	}
	return fmt.Errorf("the server answered HTTP %d (%s): the request may have run", code, oneLine(b))
}

func short(sid string) string {
	if len(sid) > 8 {
		return sid[:8] + "…"
	}
	return sid
}

func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return safetext.Escape(s)
}

// answerOf reads a JSON body: the response to id.
func answerOf(b []byte, id json.RawMessage) (json.RawMessage, error) {
	m, err := jsonrpc.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("the answer is not a JSON-RPC message: %v", err)
	}
	if !m.IsResponse() || string(m.ID) != string(id) {
		return nil, fmt.Errorf("the answer is not the response to request %s", id)
	}
	if m.Error != nil {
		return nil, m.Error
	}
	return m.Result, nil
}

// readStream reads an SSE stream until the response to id; what comes before it is delivered
// in order first.
func (s *Session) readStream(ctx context.Context, r io.Reader, id json.RawMessage) (json.RawMessage, error) {
	var res json.RawMessage
	var rerr error
	found := false
	err := readEvents(r, func(data []byte) bool {
		m, err := jsonrpc.Parse(data)
		if err != nil {
			s.logf("the server sent an event that is not a JSON-RPC message (%v); ignored", err)
			return true
		}
		if m.IsResponse() && string(m.ID) == string(id) {
			found = true
			res = m.Result
			if m.Error != nil {
				rerr = m.Error
			}
			return false
		}
		s.incoming(m)
		return true
	})
	if found {
		s.barrier()
		if rerr != nil {
			return nil, rerr
		}
		return res, nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("the event stream ended before the response: %w", err)
}

// readEvents calls fn with the data of each event of an SSE stream until fn returns false or
// the stream ends.
func readEvents(r io.Reader, fn func(data []byte) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxMessage+64)
	var data []byte
	has := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if has {
				if !fn(data) {
					return nil
				}
			}
			data, has = data[:0], false
			continue
		}
		if line[0] == ':' {
			continue // a comment (keep-alive)
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) == "data" {
			if has {
				data = append(data, '\n')
			}
			data = append(data, value...)
			has = true
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("an event is longer than %d bytes", MaxMessage)
		}
		return err
	}
	if has {
		fn(data)
	}
	return nil
}

// incoming queues a notification or a request of the server, in order.
func (s *Session) incoming(m *jsonrpc.Message) {
	switch {
	case m.IsNotification():
		s.queue(note{method: m.Method, params: m.Params})
	case m.IsRequest():
		s.queue(note{req: m})
	case m.IsResponse():
		s.logf("the server sent a response to request %s that is not waiting on this stream; ignored", m.ID)
	}
}

func (s *Session) queue(n note) {
	select {
	case s.notes <- n:
	case <-s.done:
	}
}

// barrier waits until everything queued before it was delivered.
func (s *Session) barrier() {
	ch := make(chan struct{})
	select {
	case s.notes <- note{barrier: ch}:
	case <-s.done:
		return
	}
	select {
	case <-ch:
	case <-s.done:
	}
}

// deliver hands notifications and requests over in order until the session ends.
func (s *Session) deliver() {
	defer close(s.notesEnd)
	for {
		var n note
		select {
		case n = <-s.notes:
		case <-s.done:
			return
		}
		switch {
		case n.barrier != nil:
			close(n.barrier)
		case n.req != nil:
			ctx, cancel := context.WithCancelCause(s.ctx)
			key := string(n.req.ID)
			s.mu.Lock()
			s.inbound[key] = cancel
			s.mu.Unlock()
			go func(m *jsonrpc.Message) {
				defer func() {
					s.mu.Lock()
					delete(s.inbound, key)
					s.mu.Unlock()
					cancel(nil)
				}()
				s.answer(ctx, m)
			}(n.req)
		case n.method == "notifications/cancelled":
			s.cancelInbound(n.params)
		case s.cfg.OnNotification != nil:
			s.cfg.OnNotification(n.method, n.params)
		}
	}
}

func (s *Session) cancelInbound(params json.RawMessage) {
	var c struct {
		RequestID json.RawMessage `json:"requestId"`
		Reason    string          `json:"reason"`
	}
	if json.Unmarshal(params, &c) != nil || c.RequestID == nil {
		return
	}
	s.mu.Lock()
	cancel := s.inbound[string(c.RequestID)]
	s.mu.Unlock()
	if cancel != nil {
		cancel(&mcpstdio.CancelReason{Reason: c.Reason})
	}
}

// answer answers a request of the server by POSTing the response.
func (s *Session) answer(ctx context.Context, m *jsonrpc.Message) {
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
	var cr *mcpstdio.CancelReason
	if errors.As(context.Cause(ctx), &cr) || s.Err() != nil {
		return // cancelled by the server, or the session is over: no answer
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
	if perr := s.post(line); perr != nil {
		s.logf("answering the server's %s: %v", m.Method, perr)
	}
}

// Notify sends a notification.
func (s *Session) Notify(method string, params json.RawMessage) error {
	return s.post(jsonrpc.Notification(method, params))
}

// post sends a message that gets no JSON-RPC answer (a notification, a response): 202.
func (s *Session) post(body []byte) error {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	s.headers(req)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("the server answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// listen keeps the GET stream open while the session lives, for the server's own messages. A
// server that offers none (405) is not asked again.
func (s *Session) listen() {
	backoff := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.url, nil)
		if err != nil {
			return
		}
		s.headers(req)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := s.cfg.Client.Do(req)
		if err == nil {
			switch {
			case resp.StatusCode == http.StatusMethodNotAllowed:
				resp.Body.Close()
				return
			case resp.StatusCode == http.StatusNotFound && s.sid != "":
				resp.Body.Close()
				s.end(fmt.Errorf("the server no longer knows session %s (HTTP 404 on GET)", short(s.sid)), false)
				return
			case resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
				backoff = 100 * time.Millisecond
				_ = readEvents(resp.Body, func(data []byte) bool {
					if m, perr := jsonrpc.Parse(data); perr == nil {
						s.incoming(m)
					}
					return s.ctx.Err() == nil
				})
				resp.Body.Close()
			default:
				resp.Body.Close()
				if resp.StatusCode >= 400 && resp.StatusCode < 500 {
					return // not offered (409: one already open elsewhere; 4xx: refused)
				}
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}
