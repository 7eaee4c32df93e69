// Package httpback talks to a remote MCP server over the Streamable HTTP transport (protocol
// revisions 2025-03-26, 2025-06-18 and 2025-11-25). It mirrors pkg/mcpstdio: an Upstream
// connects (initialize) on first use and again after the server lost the session, and a
// Session sends concurrent requests, returns each result as the exact bytes the server wrote,
// delivers the server's notifications and requests to callbacks, and ends with DELETE.
//
// Every JSON-RPC message is POSTed to the one endpoint with Accept: application/json,
// text/event-stream; the answer is JSON or an SSE stream that carries notifications and
// requests and finally the response. Mcp-Session-Id from the initialize response and
// MCP-Protocol-Version (the negotiated version) go on every later request. A GET stream for
// the server's own messages is opened when the server offers one (405: it does not).
//
// What a caller can rely on when a call fails (the proxy core's contract, docs/proxy-core.md):
//   - errors.Is(err, mcpstdio.ErrNotSent): the request definitely did not reach the server:
//     no connection to it could be made (no byte of the request was written), the session had
//     already ended, or the server answered 404 to the session id (it no longer knows the
//     session and, by the transport's rules, refused the request unread; the Upstream
//     re-initializes on the next Session). A 400 also retires the session, but its error is
//     "may have run"; so does the server's refusal (400, 404) to give the session a new GET
//     stream after it gave it one, which is how a restarted server is usually noticed before
//     a call meets it, and its 404 to the resumption of a call's cut stream (that call may
//     have run). A retired session refuses new requests; calls already under way on it
//     go on to their answers.
//   - *jsonrpc.Error (errors.As): the server answered HTTP 200 with a JSON-RPC error.
//   - a context error: the caller stopped waiting; notifications/cancelled was sent; the
//     request may have run.
//   - anything else (*StatusError for 4xx other than 404 and for 5xx, a reset, a stream cut
//     before the response, ErrTooLarge): the request may have run.
//
// No request is ever sent twice: the HTTP client may not replay a POST (GetBody is unset and
// redirects are not followed), and nothing here retries. The one exception is resuming a cut
// SSE stream with GET and Last-Event-ID, which re-sends nothing: again after each resumption
// that brought a new event (a polling server), never twice at the same event.
//
// Order: as in mcpstdio, the notifications and requests the server put on a stream before a
// response are delivered (OnNotification returned; OnRequest started) before the Call that
// waits for that response returns. All streams of a session feed one delivery queue, so
// OnNotification runs on one goroutine, in order per stream, and must not wait for a Call.
package httpback

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/internal/inbound"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// MaxMessage bounds one message from the server (64 MiB, like mcpstdio.MaxLine).
const MaxMessage = mcpstdio.MaxLine

// maxMessage is MaxMessage; a variable so tests can lower it.
var maxMessage = MaxMessage

// Header names of the transport.
const (
	HeaderSessionID       = "Mcp-Session-Id"
	HeaderProtocolVersion = "Mcp-Protocol-Version"
	headerLastEventID     = "Last-Event-Id"
)

// Defaults.
const (
	DefaultInitTimeout = mcpstdio.DefaultInitTimeout
	// RestartBackoff is how long Upstream.Session returns a failed connect's error before it
	// tries again.
	RestartBackoff = mcpstdio.RestartBackoff
	closeGrace     = 2 * time.Second
	getRetry       = time.Second
)

// tailWait bounds how long a body may go on after what decides the call: the body of an HTTP
// error answer, the rest of a JSON answer's body after its JSON value (a variable for tests).
var tailWait = 5 * time.Second

// ErrSessionLost says the server answered 404 to the session id: it no longer knows the
// session (it restarted, or ended it). Errors with it also wrap mcpstdio.ErrNotSent.
var ErrSessionLost = errors.New("httpback: the MCP server no longer knows the session (HTTP 404)")

// errSessionGone retires a session whose server refused to reopen its GET stream (listen).
var errSessionGone = errors.New("httpback: the MCP server no longer knows the session (it refused to reopen the session's GET stream)")

// StatusError is an HTTP answer other than the transport's 200 or 202. The request may have
// run. RPC is the JSON-RPC error the body carried, if any: informative only, deliberately not
// returned through errors.As, since a 5xx with an error object does not say the call did not
// run.
type StatusError struct {
	Method string
	Status int
	RPC    *jsonrpc.Error
	// retryAfter is the answer's Retry-After (a GET's only; 0: none).
	retryAfter time.Duration
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("httpback: MCP server answered %s with HTTP %d", e.Method, e.Status)
	if e.RPC != nil {
		s += " (" + safetext.Clip(safetext.Escape(e.RPC.Error()), 300) + ")"
	}
	return s
}

// Config says where the server is and how to handle what it sends.
type Config struct {
	// URL is the MCP endpoint (http or https). Required.
	URL string
	// Header is sent on every request (e.g. a client's Authorization passed through). Its
	// values are never logged. The transport's own headers override it; its Accept-Encoding,
	// Idempotency-Key, X-Idempotency-Key, Mcp-Session-Id, Mcp-Protocol-Version and
	// Last-Event-ID are not sent.
	Header http.Header
	// Init is the params object of initialize, sent as given. Empty: mcpstdio.DefaultInit.
	Init json.RawMessage
	// InitTimeout bounds the initialize exchange. Default DefaultInitTimeout.
	InitTimeout time.Duration
	// OnNotification receives each notification, in order, on one goroutine of the session
	// (same contract as mcpstdio.Config.OnNotification).
	OnNotification func(method string, params json.RawMessage)
	// OnRequest answers a request of the server (sampling, elicitation, roots), on its own
	// goroutine; the answer is POSTed back. Return a *jsonrpc.Error to send that error. Nil
	// answers everything but ping with "method not found".
	OnRequest func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	// Log receives diagnostics (lines starting "httpback:"). Default os.Stderr.
	Log io.Writer
	// Client is the HTTP client. Default: timeouts for dialing and TLS, none on a call, and a
	// transport of the Upstream's own, whose idle connections Close and Kill close. Its
	// redirect policy is replaced: a POST is never re-sent to another location.
	Client *http.Client
}

// DefaultClient returns the client used when Config.Client is nil: bounded dialing and TLS
// handshakes, no overall timeout (a tool call may take minutes), HTTP/1.1 or HTTP/2 over TLS.
func DefaultClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Upstream is a remote server that (re)connects on demand, like mcpstdio.Child.
type Upstream struct {
	cfg    Config
	client *http.Client
	own    bool // client is DefaultClient's, made for this Upstream alone
	start  chan struct{}

	mu       sync.Mutex
	cur      *Session
	stopping *Session
	draining map[*Session]bool // retired sessions whose calls are still in flight
	starts   int
	lastErr  error
	lastAt   time.Time
	closed   bool
	// abort ends the handshake in progress, if any: Close and Kill must reach a session still
	// being initialized (before 2026-12-04 they did not, and its stop waited for the
	// initialize until InitTimeout).
	abort context.CancelFunc
}

// NewUpstream returns an Upstream that connects on first use. A bad Config is reported by
// the first Session.
func NewUpstream(cfg Config) *Upstream {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.InitTimeout <= 0 {
		cfg.InitTimeout = DefaultInitTimeout
	}
	if len(cfg.Init) == 0 {
		cfg.Init = mcpstdio.DefaultInit("effectfence", "dev")
	}
	c := cfg.Client
	if c == nil {
		c = DefaultClient()
	}
	cc := *c
	cc.CheckRedirect = noRedirect
	return &Upstream{cfg: cfg, client: &cc, own: cfg.Client == nil, start: make(chan struct{}, 1)}
}

// Session returns the live session, connecting (initialize) when there is none. A connect
// that failed less than RestartBackoff ago returns its error again. Its errors wrap
// mcpstdio.ErrNotSent: the caller's request has not gone anywhere.
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
		return nil, fmt.Errorf("%w: httpback: upstream closed", mcpstdio.ErrNotSent)
	}
	if u.cur != nil && u.cur.Err() == nil {
		s := u.cur
		u.mu.Unlock()
		return s, nil
	}
	old := u.cur
	u.cur = nil
	if u.lastErr != nil && time.Since(u.lastAt) < RestartBackoff {
		err := u.lastErr
		u.mu.Unlock()
		return nil, err
	}
	u.starts++
	cctx, abort := context.WithCancel(ctx)
	defer abort()
	u.abort = abort
	u.mu.Unlock()
	if old != nil {
		u.drain(old)
	}
	s, err := connect(cctx, u.cfg, u.client)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.abort = nil
	if err != nil {
		if !errors.Is(err, mcpstdio.ErrNotSent) {
			err = fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, err)
		}
		u.lastErr, u.lastAt = err, time.Now()
		return nil, u.lastErr
	}
	if u.closed {
		go s.Close()
		return nil, fmt.Errorf("%w: httpback: upstream closed", mcpstdio.ErrNotSent)
	}
	u.lastErr, u.cur = nil, s
	return s, nil
}

// Current returns the live session or nil; it never connects.
func (u *Upstream) Current() *Session {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cur != nil && u.cur.Err() == nil {
		return u.cur
	}
	return nil
}

// Starts is how many times the Upstream tried to initialize a session.
func (u *Upstream) Starts() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.starts
}

// Close ends the live session (DELETE, at most 2 s); later Session calls fail.
func (u *Upstream) Close() error { return u.closeWith(func(s *Session) error { return s.Close() }) }

// CloseWithin is Close with a budget for the DELETE.
func (u *Upstream) CloseWithin(d time.Duration) error {
	return u.closeWith(func(s *Session) error { return s.CloseWithin(d) })
}

// Kill ends the live session at once, without DELETE.
func (u *Upstream) Kill() error { return u.closeWith(func(s *Session) error { return s.Kill() }) }

// drain stops a session the server lost once the calls still in flight on it have returned
// (without DELETE: the server no longer knows it). Its calls are not cut short: a call the
// server is running still gets its answer.
func (u *Upstream) drain(old *Session) {
	u.mu.Lock()
	if u.draining == nil {
		u.draining = map[*Session]bool{}
	}
	u.draining[old] = true
	u.mu.Unlock()
	go func() {
		select {
		case <-old.drained:
		case <-old.bg.Done():
		}
		_ = old.stop(0, false)
		u.mu.Lock()
		delete(u.draining, old)
		u.mu.Unlock()
	}()
}

func (u *Upstream) closeWith(stop func(*Session) error) error {
	u.mu.Lock()
	u.closed = true
	if u.abort != nil {
		u.abort() // the handshake in progress fails, and its session is stopped
	}
	s := u.cur
	if s == nil {
		s = u.stopping
	}
	u.cur, u.stopping = nil, s
	var old []*Session
	for d := range u.draining {
		old = append(old, d)
	}
	u.mu.Unlock()
	for _, d := range old {
		_ = d.stop(0, false)
	}
	var err error
	if s != nil {
		err = stop(s)
	}
	if u.own {
		// Nothing will use the connections kept alive for this Upstream: close them now
		// rather than when they have idled for IdleConnTimeout (a gateway makes an Upstream
		// per agent session).
		u.client.CloseIdleConnections()
	}
	return err
}

// Session is one initialized MCP session with the server. Safe for concurrent use.
type Session struct {
	cfg     Config
	client  *http.Client
	url     string
	logURL  string
	init    json.RawMessage
	sid     string
	version string

	nextID   atomic.Int64
	mu       sync.Mutex
	err      error
	done     chan struct{}
	inflight int             // Calls under way
	drained  chan struct{}   // closed once the session ended and no Call is under way
	bg       context.Context // ends with the session: GET stream, OnRequest, in-flight calls
	bgStop   context.CancelFunc
	notes    chan note
	outbox   chan outNote   // Notify's notifications, POSTed in order by forward
	qmu      sync.RWMutex   // read-held while queueing; deliver takes it to close the queue
	qclosed  bool           // deliver has stopped: nothing more may be queued
	wg       sync.WaitGroup // deliver, forward and the GET stream
	closeM   sync.Mutex
	closed   bool
	inbound  inbound.Table // the server's requests being answered, at most mcpstdio.MaxInbound
	ignored  atomic.Int64  // messages of the server ignored so far (ignoredf)
	streamed atomic.Bool   // the server gave the session a GET stream once
	quiet    time.Duration // resumedQuiet when the session began
	// asked holds the ids of the server's last maxAsked requests (deliver's alone): one handed
	// over again is not answered twice.
	asked recent
	// noted holds the last maxAsked notification events that came with an id, by id and
	// content (replayedNote): one replayed on a resumed stream is not delivered twice.
	notedMu sync.Mutex
	noted   recent
}

// recent is a set of the last maxAsked keys added to it, in the order they came.
type recent struct {
	set  map[string]bool
	ring []string
}

// seen reports whether key is in the set, and adds it when it is not, dropping the oldest
// key once the set holds maxAsked.
func (r *recent) seen(key string) bool {
	if r.set[key] {
		return true
	}
	if r.set == nil {
		r.set = map[string]bool{}
	}
	if len(r.ring) == maxAsked {
		delete(r.set, r.ring[0])
		r.ring = r.ring[1:]
	}
	r.set[key] = true
	r.ring = append(r.ring, key)
	return false
}

// maxAsked bounds the server request ids a session remembers (asked), maxAskedID the length of
// one.
const maxAsked, maxAskedID = 4096, 256

// askedBefore reports whether the server's request id was delivered before in this session,
// and remembers it. deliver skips such a request when it came on a resumed stream, which
// replays only what the client has not seen yet: a request seen before is one replayed (a
// server that reuses an id once it has the first one's answer, on a stream that was not
// resumed, is answered as before: TestCancellationOfAReusedID). An event store that replays, on a resumption, every
// event of the session after Last-Event-ID and not only that stream's (server-everything's
// own does) hands over again a request already answered on another stream. Before 2026-12-06
// OnRequest ran for it again: a second sampling, or a question put twice to a person
// (TestReplayedServerRequestIsNotAnsweredTwice).
func (s *Session) askedBefore(id json.RawMessage) bool {
	key := jsonrpc.IDKey(id)
	if len(key) > maxAskedID {
		return false // not remembered: ids are short, and a hostile server's could fill memory
	}
	return s.asked.seen(key)
}

// replayedNote reports whether a notification event came before in this session, by its
// event id and its data, when it comes on a resumed stream, and remembers it. An event store
// that replays, on a resumption, every event of the session after Last-Event-ID and not only
// that stream's (server-everything's own does) hands over again what another stream of the
// session delivered already, and a call's resumed stream watched by resumedQuiet is resumed
// every quiet spell (found in review, 2026-12-07, while the session's GET stream was resumed
// so too: 4 progress notifications delivered for 2 steps). The data counts too: a
// server that numbers each stream's events on its own (the spec says they are unique in the
// session) loses none of them.
func (s *Session) replayedNote(ev sseEvent, resumed bool) bool {
	if !ev.hasID || len(ev.id) > maxAskedID {
		return false
	}
	sum := sha256.Sum256(ev.data)
	key := ev.id + "\x00" + string(sum[:16])
	s.notedMu.Lock()
	defer s.notedMu.Unlock()
	return s.noted.seen(key) && resumed
}

// note is one item of the delivery queue.
type note struct {
	method string
	params json.RawMessage
	req    *jsonrpc.Message
	to     chan struct{} // a response: closed when everything before it was delivered
	held   int64         // the share of AnswerBudget its message keeps until delivered (a request: answered)
	// replayed: it came on a resumed stream (a GET with Last-Event-ID)
	replayed bool
}

func connect(ctx context.Context, cfg Config, client *http.Client) (*Session, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("httpback: the upstream URL must be an absolute http or https URL, got %q", safetext.Clip(safetext.Escape(ShownURL(cfg.URL)), 200))
	}
	if !json.Valid(cfg.Init) || bytes.TrimSpace(cfg.Init)[0] != '{' {
		return nil, errors.New("httpback: initialize params must be a JSON object")
	}
	s := &Session{cfg: cfg, client: client, url: u.String(), logURL: ShownURL(cfg.URL), done: make(chan struct{}), drained: make(chan struct{}), notes: make(chan note, 1024), outbox: make(chan outNote, maxOutbox), quiet: resumedQuiet}
	s.bg, s.bgStop = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.deliver()
	ictx, cancel := context.WithTimeout(ctx, cfg.InitTimeout)
	defer cancel()
	res, hdr, err := s.roundTrip(ictx, "initialize", cfg.Init, false)
	if err == nil && (len(res) == 0 || res[0] != '{') {
		err = fmt.Errorf("initialize result is not a JSON object: %s", safetext.Clip(string(res), 200))
	}
	if err == nil {
		// Its "protocolVersion", spelled so, as MCP's SDK clients read it (the agent reads this
		// result as it is): encoding/json also took "ProtocolVersion", and kept the last.
		var version string
		_ = json.Unmarshal(jsonrpc.MemberValue(res, "protocolVersion"), &version)
		if !headerSafe(version) {
			err = fmt.Errorf("initialize result has no usable protocolVersion: %s", safetext.Clip(string(res), 200))
		}
		sid := hdr.Get(HeaderSessionID)
		if sid != "" && !headerSafe(sid) {
			err = errors.New("the server's Mcp-Session-Id has characters outside visible ASCII")
		}
		if err == nil {
			s.mu.Lock()
			s.sid, s.version = sid, version
			s.mu.Unlock()
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("did not answer initialize within %s", cfg.InitTimeout)
		}
		s.stop(0, false)
		return nil, fmt.Errorf("httpback: handshake with MCP server %s failed: %w", s.logURL, err)
	}
	s.init = res
	if err := s.notify(ictx, "notifications/initialized", nil); err != nil {
		s.stop(0, false)
		return nil, fmt.Errorf("httpback: handshake with MCP server %s failed: %w", s.logURL, err)
	}
	s.wg.Add(2)
	go s.listen()
	go s.forward()
	return s, nil
}

// headerSafe reports whether v is non-empty visible ASCII, as a header value must be.
func headerSafe(v string) bool {
	if v == "" || len(v) > 1024 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// ShownURL is a URL as messages show it (logs, and errors, which wrap records in the ledger as
// the reason of a call the server cut off and shows to the agent): its scheme and host, then
// "/…" for whatever else it had. That rest can hold the account's secret: user information, a
// query (?api_key=), and the path too, where hosted MCP servers and webhooks put it
// (https://…/api/mcp/s/<secret>/mcp, https://hooks.slack.com/services/<…>). Before
// 2026-12-04 the path was shown.
func ShownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	shown := (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	if (u.Path != "" && u.Path != "/") || u.RawPath != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		shown += "/…"
	}
	return shown
}

// InitResult is the server's initialize result, as it wrote it.
func (s *Session) InitResult() json.RawMessage { return s.init }

// ID is the Mcp-Session-Id the server assigned ("" when it assigned none). It is a
// credential of sorts: do not log it.
func (s *Session) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sid
}

// ProtocolVersion is the negotiated protocol version.
func (s *Session) ProtocolVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Done is closed when the session ended; Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session is live, and then why it ended.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// end ends the session and cuts short everything still running on it.
func (s *Session) end(err error) {
	s.retire(err)
	s.bgStop()
}

// retire ends the session for new requests; calls under way go on.
func (s *Session) retire(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.done)
		if s.inflight == 0 {
			close(s.drained)
		}
	}
}

func (s *Session) logf(format string, a ...any) {
	fmt.Fprintln(s.cfg.Log, "httpback: "+safetext.Escape(fmt.Sprintf(format, a...))) // one line, whatever the server sent
}

// ignoredLogged and ignoredEvery bound the log lines of ignored messages: a session logs its
// first ignoredLogged, then one in every ignoredEvery with the count.
const ignoredLogged, ignoredEvery = 20, 1000

// ignoredf logs a message of the server that was ignored (not JSON-RPC, a response nobody
// waits for). A server that streams nothing else would otherwise write a log line per event,
// at the speed of the network, for as long as the call waits.
func (s *Session) ignoredf(format string, a ...any) {
	switch n := s.ignored.Add(1); {
	case n <= ignoredLogged:
		s.logf(format, a...)
	case n%ignoredEvery == 0:
		s.logf("%d messages of MCP server %s ignored in this session so far (only the first %d and every %dth are logged); this one: "+format, append([]any{n, s.logURL, ignoredLogged, ignoredEvery}, a...)...)
	}
}

// Call sends a request and waits for its response; see the package comment for the errors.
func (s *Session) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if params != nil && !json.Valid(params) {
		return nil, fmt.Errorf("%w: params of %s are not valid JSON", mcpstdio.ErrNotSent, method)
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, err)
	}
	s.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		if s.inflight == 0 && s.err != nil {
			close(s.drained)
		}
		s.mu.Unlock()
	}()
	res, _, err := s.roundTrip(ctx, method, params, true)
	return res, err
}

// roundTrip POSTs one request and reads its answer. cancelOnCtx sends
// notifications/cancelled when ctx ends the call after the request was sent.
func (s *Session) roundTrip(ctx context.Context, method string, params json.RawMessage, cancelOnCtx bool) (json.RawMessage, http.Header, error) {
	id := json.RawMessage(strconv.FormatInt(s.nextID.Add(1), 10))
	body := jsonrpc.Request(id, method, params)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	stopBG := context.AfterFunc(s.bg, rcancel)
	defer stopBG()

	resp, sent, err := s.post(rctx, body)
	if err != nil {
		if !sent {
			if s.Err() != nil {
				return nil, nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, s.Err())
			}
			return nil, nil, fmt.Errorf("%w: %s to MCP server %s: %w", mcpstdio.ErrNotSent, method, s.logURL, err)
		}
		return nil, nil, s.failed(ctx, id, method, cancelOnCtx, err)
	}
	defer resp.Body.Close()
	if err := s.status(resp, method, rcancel); err != nil {
		return nil, resp.Header, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	// The answer's bytes count against the process's budget (budget.go); what the answer
	// holds is kept until the caller is done with it, anything else given back on return.
	meter := newMeter(rctx, resp.Body, resp.ContentLength)
	defer meter.next()
	var m *jsonrpc.Message
	switch {
	case resp.StatusCode == http.StatusAccepted:
		err = fmt.Errorf("httpback: MCP server answered the request %s with 202 Accepted and no response", method)
	case mt == "application/json":
		m, err = s.readJSON(meter, id, rcancel)
	case mt == "text/event-stream":
		m, err = s.readStream(rctx, meter, resp.Body, id, method)
	default:
		err = fmt.Errorf("httpback: MCP server answered %s with Content-Type %q", method, safetext.Clip(safetext.Escape(resp.Header.Get("Content-Type")), 100))
	}
	if err != nil {
		return nil, resp.Header, s.failed(ctx, id, method, cancelOnCtx, err)
	}
	if m.Error != nil {
		return nil, resp.Header, m.Error
	}
	meter.done()
	return m.Result, resp.Header, nil
}

// failed turns an error after the request was sent into the caller's error.
func (s *Session) failed(ctx context.Context, id json.RawMessage, method string, cancelOnCtx bool, err error) error {
	if ctx.Err() != nil {
		if cancelOnCtx {
			s.cancelled(ctx, id)
		}
		return ctx.Err()
	}
	if s.Err() != nil {
		return fmt.Errorf("httpback: %s: the session ended while waiting (the request may have run): %w", method, s.Err())
	}
	if errors.Is(err, ErrTooLarge) {
		return err
	}
	var se *StatusError
	if errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("httpback: %s to MCP server %s (the request may have run): %w", method, s.logURL, err)
}

func (s *Session) cancelled(ctx context.Context, id json.RawMessage) {
	note := map[string]any{"requestId": id, "reason": ctx.Err().Error()}
	var why *mcpstdio.CancelReason
	if errors.As(context.Cause(ctx), &why) {
		note["reason"] = why.Reason
		if why.Reason == "" {
			delete(note, "reason")
		}
	}
	p, _ := json.Marshal(note)
	nctx, cancel := context.WithTimeout(s.bg, 10*time.Second)
	defer cancel()
	if err := s.notify(nctx, "notifications/cancelled", p); err != nil && s.Err() == nil {
		s.logf("cannot send notifications/cancelled to MCP server %s: %v", s.logURL, err)
	}
}

// post sends one JSON-RPC message. sent is false only when the transport looked for a
// connection (GetConn) and obtained none (no GotConn), so no byte of the request can have
// reached the server. A transport that does not report to httptrace (a Config.Client that is
// not net/http's) gives no such evidence: its failures may have run. Before 2026-12-05 its
// every failure, a request cut after it was written included, was "not sent".
func (s *Session) post(ctx context.Context, body []byte) (*http.Response, bool, error) {
	var getConn, gotConn atomic.Bool
	trace := &httptrace.ClientTrace{
		GetConn: func(string) { getConn.Store(true) },
		GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.GetBody = nil // never let the transport replay the body
	s.headers(req)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if err := ctx.Err(); err != nil {
		return nil, false, err // ended before the transport had the request
	}
	resp, err := s.do(req)
	if err != nil {
		return nil, (gotConn.Load() || !getConn.Load()) && !closedBeforeWritten(err), err
	}
	return resp, true, nil
}

// closedIdle is the text of net/http's error for a pooled connection that the server closed
// after the transport took it for a request, but before any byte of the request was written.
// The transport sets it only when it reads the server's close while it expects no answer on
// the connection, and it counts a request as expected before writing any of it; with a body
// it may not replay (GetBody is nil) it gives the request up with this error, unwrapped.
const closedIdle = "http: server closed idle connection"

// closedBeforeWritten reports whether err says that none of the request reached the server
// (Go's transport gave it up on a pooled connection the server had closed, before writing).
func closedBeforeWritten(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err != nil && err.Error() == closedIdle
}

// do sends req; its error names the URL without userinfo and query, which may hold secrets.
func (s *Session) do(req *http.Request) (*http.Response, error) {
	resp, err := s.client.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = s.logURL
	}
	return resp, err
}

func (s *Session) headers(req *http.Request) {
	for k, v := range s.cfg.Header {
		req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), v...)
	}
	req.Header.Del("Idempotency-Key")
	req.Header.Del("X-Idempotency-Key")
	// Go's transport asks for gzip and decodes the answer only when the request names no
	// encoding: one configured (copied from a browser or curl --compressed) left a compressed
	// answer unreadable, so a call that ran was unknown behind a proxy that compresses large
	// answers (before 2026-12-07; TestAcceptEncodingOfTheConfigIsTheTransportsOwn).
	req.Header.Del("Accept-Encoding")
	// The session's own headers are the transport's alone, also where it sends none: a
	// configured Last-Event-ID made the session's first GET a resumption from an event the
	// server never sent (server-everything then filed that stream where nothing is written,
	// and every message it sent the session on it was lost), a configured Mcp-Session-Id made
	// initialize a request of a session the server does not know (HTTP 400). Before 2026-12-07
	// both were sent (TestConfiguredSessionHeadersAreNotSent).
	req.Header.Del(HeaderSessionID)
	req.Header.Del(HeaderProtocolVersion)
	req.Header.Del(headerLastEventID)
	s.mu.Lock()
	sid, version := s.sid, s.version
	s.mu.Unlock()
	if sid != "" {
		req.Header.Set(HeaderSessionID, sid)
	}
	if version != "" {
		req.Header.Set(HeaderProtocolVersion, version)
	}
}

// status checks the HTTP status of an answer to a POST. stop cancels the request, ending a
// read of its body.
func (s *Session) status(resp *http.Response, method string, stop context.CancelFunc) error {
	switch resp.StatusCode {
	case http.StatusOK, http.StatusAccepted:
		return nil
	case http.StatusNotFound:
		if s.ID() != "" {
			s.retire(ErrSessionLost)
			return fmt.Errorf("%w: %s: %w", mcpstdio.ErrNotSent, method, ErrSessionLost)
		}
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		// Authentication is decided before any MCP handling: the request did not run. A
		// definite refusal, so a wrong or expired token does not leave calls unknown.
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("the MCP server refused %s: HTTP %d %s (check the upstream's credentials)", method, resp.StatusCode, http.StatusText(resp.StatusCode))}
	}
	se := &StatusError{Method: method, Status: resp.StatusCode}
	// The status decides the outcome; the body only informs. A server that stalls while
	// writing it must not hold the call, so its read is cut off after tailWait.
	cut := time.AfterFunc(tailWait, stop)
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	cut.Stop()
	var body struct {
		Error *jsonrpc.Error `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil && body.Error != nil { // often without an id: informative only
		se.RPC = body.Error
	}
	if resp.StatusCode == http.StatusBadRequest && s.ID() != "" {
		// Servers built on the TypeScript SDK's examples answer 400 to a session id they do not
		// know (after a restart). The request may have run for all we can tell, but the
		// session is not to be trusted: the next Session initializes a new one.
		s.retire(fmt.Errorf("httpback: MCP server answered HTTP 400 to a request of the session: %w", se))
	}
	return se
}

// readJSON reads the JSON answer to id. The answer counts once its one JSON value is
// complete: a body that then goes on without ending is cut off (stop) after tailWait, or
// breaks off, and the value is the answer; anything but whitespace after it makes the body
// invalid.
func (s *Session) readJSON(r io.Reader, id json.RawMessage, stop context.CancelFunc) (*jsonrpc.Message, error) {
	lr := &io.LimitedReader{R: r, N: int64(maxMessage) + 1}
	tooLarge := fmt.Errorf("%w: the response is longer than %d bytes", ErrTooLarge, maxMessage)
	dec := json.NewDecoder(lr)
	var b json.RawMessage
	if err := dec.Decode(&b); err != nil {
		if lr.N == 0 {
			return nil, tooLarge
		}
		if err == io.EOF {
			return nil, errors.New("the response body is empty")
		}
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, fmt.Errorf("the response is not a JSON-RPC message: %v", err)
		}
		return nil, err
	}
	var cut atomic.Bool
	t := time.AfterFunc(tailWait, func() { cut.Store(true); stop() })
	tail, err := io.ReadAll(io.MultiReader(dec.Buffered(), lr))
	t.Stop()
	switch {
	case lr.N == 0:
		return nil, tooLarge
	case len(bytes.TrimSpace(tail)) > 0:
		return nil, fmt.Errorf("the response is not a JSON-RPC message: more follows its JSON value: %.100q", tail)
	case err != nil && cut.Load():
		s.logf("MCP server %s did not end the body of its JSON response within %s after the response; the response counts", s.logURL, tailWait)
	case err != nil:
		// The value came whole and nothing but whitespace after it: the connection breaking
		// off then (the server killed once it wrote its answer, a proxy closing without the
		// chunked body's last chunk) takes nothing from the response. Before 2026-12-07 the
		// call was "may have run", and a call that ran and answered was fenced unknown
		// (TestJSONAnswerCutAfterItsValueStands).
		s.logf("the body of MCP server %s's JSON response broke off after the response (%v); the response counts", s.logURL, err)
	}
	m, err := jsonrpc.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("the response is not a JSON-RPC message: %v", err)
	}
	if !m.IsResponse() || !sameID(m.ID, id) {
		return nil, fmt.Errorf("the JSON answer is not the response to request id %s", id)
	}
	return m, nil
}

// readStream reads a call's SSE stream until the response to id, queueing what comes before
// it, and returns the response once that has been delivered. A stream cut before the
// response is resumed once with GET and Last-Event-ID when the server gave event ids.
func (s *Session) readStream(ctx context.Context, meter *meter, body io.ReadCloser, id json.RawMessage, method string) (*jsonrpc.Message, error) {
	// A stream is resumed again only after the last resumption brought a new event: a server
	// that polls (2025-11-25: it ends the stream after each event and expects the client back
	// with Last-Event-ID) is followed for as long as it makes progress, one resumption a
	// getRetry after the first; a stream cut twice at the same event is given up. A resumed
	// stream that brings no event for resumedQuiet is resumed again (see quietWatch), as often
	// as the server takes the resumption or refuses it with a 409; other refusals end the call
	// after quietRounds rounds.
	lastID, resumedAt, resumes := "", "", 0
	var watch *quietWatch
	// The stream's reconnection time (SSE retry field; 2025-11-25: a client MUST wait it
	// before it reconnects), up to maxRetryAfter; until the server sends one, none before the
	// first resumption and a getRetry before each later one.
	var reconnect time.Duration
	for {
		var seen func()
		if watch != nil {
			seen = watch.event
		}
		m, err := s.pump(ctx, meter, id, &lastID, resumes > 0, seen, &reconnect)
		quiet := watch != nil && watch.stop()
		if err == nil {
			return m, nil
		}
		if errors.Is(err, ErrTooLarge) || errors.Is(err, errInvalidAnswer) || ctx.Err() != nil || lastID == "" || (!quiet && resumes > 0 && lastID == resumedAt) {
			if errors.Is(err, io.EOF) {
				err = errors.New("the server ended the event stream before the response")
			}
			return nil, err
		}
		if quiet {
			err = fmt.Errorf("no event for %s since it was resumed or since its last event", s.quiet)
		}
		wait := min(reconnect, maxRetryAfter)
		if resumes > 0 {
			wait = max(wait, getRetry)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(wait):
			}
		}
		resumes++
		resumedAt = lastID
		s.logf("event stream of %s from MCP server %s ended before the response (%v); resuming (%d)", method, s.logURL, err, resumes)
		resp, gerr := s.resume(ctx, lastID)
		// A 409 is the server, alive, saying it still holds the stream; anything else that may
		// pass (429, a 5xx, no answer: a proxy whose server is gone, or the server itself gone)
		// is given quietRounds rounds, then the call fails as a cut stream does. Before
		// 2026-12-07 (found in the final read) a server gone after a quiet spell kept the call
		// asking for ever, its claim held, where the cut stream had ended it.
		others := 0
		for quiet && gerr != nil && mayPass(gerr) && ctx.Err() == nil && s.bg.Err() == nil {
			if !isConflict(gerr) {
				if others++; others >= quietRounds {
					break
				}
			}
			// The stream closed for its quiet spell may still be the server's, fed, behind a
			// proxy that does not pass the close on: the server refuses (409) until the
			// call's response ends that stream, and replays it after
			// (TestQuietResumptionRefusedWhileTheServerHoldsTheOldStream). A GET re-sends
			// nothing: asked again, a resumedQuiet apart, while the call waits.
			select {
			case <-ctx.Done():
			case <-s.bg.Done():
			case <-time.After(retryDelay(gerr, s.quiet)):
			}
			resp, gerr = s.resume(ctx, lastID)
		}
		if gerr != nil {
			var se *StatusError
			if errors.As(gerr, &se) && se.Status == http.StatusNotFound && s.ID() != "" {
				// 404 to the session's id: the server no longer knows the session (it
				// restarted). The call may have run; the session is retired now, so the next
				// call opens a new one instead of being sent on this one (before, it stayed
				// live until its GET stream noticed, if it had one:
				// TestCallResumptionRefused404RetiresTheSession).
				s.retire(ErrSessionLost)
			}
			return nil, fmt.Errorf("the event stream was cut before the response (%v) and resuming it failed: %w", err, gerr)
		}
		body.Close()
		if resumes == 1 {
			// The last body is closed on return: one deferred call, not one a resumption (a
			// task's tasks/result resumed every quiet spell for hours kept each until then).
			defer func() { body.Close() }()
		}
		body = resp.Body
		meter.r, meter.size = body, int64(maxMessage)
		meter.next()
		watch = watchQuiet(s.quiet, body)
	}
}

// resumedQuiet is how long a resumed stream of a call may bring no event (keep-alive comments
// are not events) before it is resumed again from the same Last-Event-ID (a variable for
// tests; a session reads it once, when it begins, so one that outlives the test that
// shortened it reads nothing the test puts back). A server may accept a resumption and never
// feed it: server-everything's event store (docs/gateway-backend.md) makes the TypeScript SDK
// file the resumed stream under the wrong id, so it replays what was stored and writes
// nothing that comes later; the call's stream then stays open, kept alive and silent, for
// ever, while a second GET with the same Last-Event-ID replays the rest. Seen behind a
// cutting proxy under load (TestTaskResultAskedAgainAfterACut, 2026-12-07: a resumption that
// brought an event was cut and resumed again, and the duplicate waited its minute on the
// silent stream, the task long done). The first stream of a call is not watched, nor the
// session's GET stream (listen). A task's tasks/result that waits for hours on a resumed
// stream is resumed again every resumedQuiet: a GET re-sends nothing.
var resumedQuiet = 20 * time.Second

// quietWatch closes a resumed stream's body once no event came for its bound.
type quietWatch struct {
	d     time.Duration
	t     *time.Timer
	fired atomic.Bool
}

func watchQuiet(d time.Duration, body io.Closer) *quietWatch {
	q := &quietWatch{d: d}
	q.t = time.AfterFunc(d, func() {
		q.fired.Store(true)
		_ = body.Close()
	})
	return q
}

// event: an event came; the bound starts again.
func (q *quietWatch) event() { q.t.Reset(q.d) }

// stop ends the watch and reports whether it closed the stream.
func (q *quietWatch) stop() bool {
	q.t.Stop()
	return q.fired.Load()
}

// resumeTries bounds the GETs of one resumption of a call's stream.
const resumeTries = 5

// resume opens the GET that resumes a call's stream after lastID. A refusal that may pass (the
// server has not yet noticed the cut and still holds the old stream: 409; 429; a 5xx; no
// answer at all) is asked again, a getRetry apart (or the server's Retry-After, up to
// maxRetryAfter), up to resumeTries GETs: a GET re-sends nothing. Before 2026-12-06 the first
// refusal ended the call, and a call that ran, whose result the server still had, was left
// unknown (TestRefusedResumptionIsAskedAgain); before 2026-12-07 Retry-After was ignored
// (TestResumptionHonoursRetryAfter).
func (s *Session) resume(ctx context.Context, lastID string) (*http.Response, error) {
	for try := 1; ; try++ {
		resp, err := s.get(ctx, lastID)
		if err == nil || try == resumeTries || ctx.Err() != nil || s.bg.Err() != nil {
			return resp, err
		}
		if !mayPass(err) {
			return nil, err // 400, 404, 405, ...: asking again would be refused again
		}
		s.logf("resuming an event stream of MCP server %s failed (%v); asking again", s.logURL, err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(retryDelay(err, getRetry)):
		}
	}
}

// quietRounds bounds the resumptions (of resumeTries GETs each) after a quiet spell that end
// otherwise than with a 409 (isConflict).
const quietRounds = 3

// isConflict: err is the server's 409 (the TypeScript SDK's "Stream already has an active
// connection").
func isConflict(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == http.StatusConflict
}

// mayPass reports whether a refused resumption may pass if asked again: 409 (the server still
// holds the stream), 429, a 5xx, or no answer at all.
func mayPass(err error) bool {
	var se *StatusError
	return !errors.As(err, &se) || se.Status == http.StatusConflict || se.Status == http.StatusTooManyRequests || se.Status >= 500
}

// errInvalidAnswer ends a call whose stream carried an event naming its id, without a method,
// that is not a valid response: the answer came, so neither waiting on nor resuming helps.
var errInvalidAnswer = errors.New("the server answered with an event that is not a valid JSON-RPC response")

// pump reads events until the response to id (nil id: forever). Each event id is stored in
// *lastID; seen, if not nil, is called at each event, once its id is stored. The stream's
// reconnection time, when it sent one (an SSE retry field), is stored in *reconnect as pump
// returns.
func (s *Session) pump(ctx context.Context, meter *meter, id json.RawMessage, lastID *string, resumed bool, seen func(), reconnect *time.Duration) (*jsonrpc.Message, error) {
	r := newSSEReader(meter, maxMessage)
	defer func() {
		if r.retrySet {
			*reconnect = r.retry
		}
	}()
	for {
		// The event before, if any, was not the answer: its share of the budget goes back.
		meter.next()
		ev, err := r.next()
		if err != nil {
			return nil, err
		}
		if ev.hasID {
			// An id HTTP cannot carry back as Last-Event-ID (a control character, or longer
			// than a header takes: the stream allows both) names no place to resume from:
			// before 2026-12-05 the GET stream asked for it in vain every second, or gave up
			// at the server's 431, for the session's life; it is opened again without one.
			*lastID = ""
			if headerSafe(ev.id) {
				*lastID = ev.id
			}
		}
		if seen != nil {
			seen()
		}
		if len(bytes.TrimSpace(ev.data)) == 0 {
			continue // a priming event
		}
		m, perr := jsonrpc.Parse(ev.data)
		if perr != nil {
			if id != nil && answersCall(ev.data, id) {
				// The server answered this call, with something that is not a response:
				// waiting on would wait for an answer that already came.
				return nil, fmt.Errorf("%w (%v): %.200q", errInvalidAnswer, perr, ev.data)
			}
			s.ignoredf("MCP server %s sent an event that is not a JSON-RPC message (%v); ignored: %.200q", s.logURL, perr, ev.data)
			continue
		}
		switch {
		case m.IsResponse():
			if id != nil && sameID(m.ID, id) {
				ch := make(chan struct{})
				if !s.queue(ctx, note{to: ch}) {
					return nil, errors.New("the session ended")
				}
				select {
				case <-ch:
					return m, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-s.bg.Done():
					return nil, errors.New("the session ended")
				}
			}
			s.ignoredf("MCP server %s sent a response to request id %s that is not waiting on this stream; ignored", s.logURL, safetext.Clip(string(m.ID), 50))
		case m.IsNotification():
			if s.replayedNote(ev, resumed) {
				continue
			}
			// A queued message stays in memory until delivered: it keeps its share of the
			// budget until then, as mcpstdio's do, so a slow OnNotification (or OnRequest)
			// cannot make the process hold more large messages than AnswerBudget.
			if !s.queue(ctx, note{method: m.Method, params: m.Params, held: meter.take()}) {
				return nil, errors.New("the session ended")
			}
		case m.IsRequest():
			if !s.queue(ctx, note{req: m, held: meter.take(), replayed: resumed}) {
				return nil, errors.New("the session ended")
			}
		}
	}
}

// answersCall reports whether data, an event Parse refused, answers the request id: a JSON
// object without a "method" member, one of whose "id" members is id. An "id" given twice is
// counted (jsonrpc.AnswerID does not): parsers differ on which one counts, so the server may
// have meant this call, and before 2026-12-05 such an answer was skipped and the call waited
// on a stream the server kept open.
func answersCall(data []byte, id json.RawMessage) bool {
	if sameID(jsonrpc.AnswerID(data), id) {
		return true
	}
	d := bytes.TrimSpace(data)
	if len(d) == 0 || d[0] != '{' || !json.Valid(d) {
		return false
	}
	if _, _, methods, _ := jsonrpc.Member(d, "method"); methods != 0 {
		return false
	}
	for m := range jsonrpc.Members(d) {
		if jsonrpc.KeyIs(d[m.Key:m.KeyEnd], "id") && sameID(d[m.Start:m.End], id) {
			return true
		}
	}
	return false
}

func (s *Session) queue(ctx context.Context, n note) bool {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	if !s.qclosed {
		select {
		case s.notes <- n:
			return true
		case <-ctx.Done():
		case <-s.bg.Done():
		}
	}
	answers.Release(n.held)
	return false
}

// closeQueue stops the queue once deliver has returned: what is left in it gives its share of
// the budget back, and nothing more is queued.
func (s *Session) closeQueue() {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	s.qclosed = true
	for {
		select {
		case n := <-s.notes:
			answers.Release(n.held)
		default:
			return
		}
	}
}

func (s *Session) deliver() {
	defer s.wg.Done()
	defer s.closeQueue()
	for {
		select {
		case n := <-s.notes:
			held := n.held
			switch {
			case n.to != nil:
				close(n.to)
			case n.req != nil && s.askedBefore(n.req.ID) && n.replayed:
				s.ignoredf("MCP server %s sent its request %s again (replayed); it was handed over already and is not answered twice", s.logURL, safetext.Clip(string(n.req.ID), 50))
			case n.req != nil:
				// Registered here, in order, so a cancellation the server sends after its
				// request finds it.
				ctx, cancel := context.WithCancelCause(s.bg)
				end, ok := s.inbound.Begin(n.req.ID, cancel)
				if !ok {
					cancel(nil)
					s.refuse(n.req) // here: a server that is slow to take it slows only itself
					break
				}
				held = 0 // the request's goroutine gives it back once answered
				go func(m *jsonrpc.Message, held int64) {
					defer func() {
						end()
						cancel(nil)
						answers.Release(held)
					}()
					s.answer(ctx, m)
				}(n.req, n.held)
			case n.method == "notifications/cancelled":
				// A server cancels only its own requests: the handler's context ends. The id is
				// the server's own and means nothing to anyone else, so it goes no further.
				s.cancelInbound(n.params)
			case s.cfg.OnNotification != nil:
				s.cfg.OnNotification(n.method, n.params)
			}
			answers.Release(held)
		case <-s.bg.Done():
			return
		}
	}
}

// cancelInbound cancels the server's request that params (of notifications/cancelled) names.
func (s *Session) cancelInbound(params json.RawMessage) {
	s.inbound.Cancel(params, func(reason string) error { return &mcpstdio.CancelReason{Reason: reason} })
}

// refuse answers a request of the server with an error at once: mcpstdio.MaxInbound of its
// requests are waiting for their answers already.
func (s *Session) refuse(m *jsonrpc.Message) {
	msg := jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("effectfence: %d requests of this server are waiting for the client already; this one is refused", mcpstdio.MaxInbound)})
	ctx, cancel := context.WithTimeout(s.bg, 30*time.Second)
	defer cancel()
	if err := s.send(ctx, "refusal of "+m.Method, msg); err != nil && s.Err() == nil {
		s.logf("cannot refuse the %s request of MCP server %s: %v", safetext.Escape(m.Method), s.logURL, err)
	}
}

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
	var why *mcpstdio.CancelReason
	if errors.As(context.Cause(ctx), &why) {
		return // the server cancelled its request: no answer is sent
	}
	var msg []byte
	switch e := err.(type) {
	case nil:
		if len(res) == 0 || !json.Valid(res) {
			res = json.RawMessage("{}")
		}
		msg = jsonrpc.Response(m.ID, res)
	case *jsonrpc.Error:
		msg = jsonrpc.ErrorResponse(m.ID, e)
	default:
		msg = jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: e.Error()})
	}
	ctx, cancel := context.WithTimeout(s.bg, 30*time.Second)
	defer cancel()
	if err := s.send(ctx, "response to "+m.Method, msg); err != nil && s.Err() == nil {
		s.logf("cannot answer the %s request of MCP server %s: %v", safetext.Escape(m.Method), s.logURL, err)
	}
}

// Notify queues a notification for the server and returns: the session POSTs its queued
// notifications one at a time, in order, each for at most 30 s, and logs a failure. It waits
// only while maxOutbox notifications are queued already. Before 2026-12-07 it returned once
// the server had answered the POST: the proxy core forwards the agent's notifications as it
// reads the agent's messages, so an upstream that did not answer (stopped, or a proxy that
// forwards nothing) held every message of the agent's behind each notification for 30 s,
// a replay from the ledger and a ping included (TestNotifyDoesNotWaitForTheServer).
func (s *Session) Notify(method string, params json.RawMessage) error {
	if params != nil && !json.Valid(params) {
		return fmt.Errorf("%w: params of %s are not valid JSON", mcpstdio.ErrNotSent, method)
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, err)
	}
	select {
	case s.outbox <- outNote{method: method, msg: jsonrpc.Notification(method, params)}:
		return nil
	case <-s.bg.Done():
		return fmt.Errorf("%w: httpback: the session ended", mcpstdio.ErrNotSent)
	}
}

// maxOutbox bounds the notifications Notify queues for the server.
const maxOutbox = 256

// outNote is a notification queued by Notify.
type outNote struct {
	method string
	msg    []byte
}

// forward POSTs the notifications Notify queued, in order, while the session lives.
func (s *Session) forward() {
	defer s.wg.Done()
	for {
		select {
		case n := <-s.outbox:
			ctx, cancel := context.WithTimeout(s.bg, 30*time.Second)
			if err := s.send(ctx, n.method, n.msg); err != nil && s.bg.Err() == nil {
				s.logf("cannot forward %s to MCP server %s: %v", n.method, s.logURL, err)
			}
			cancel()
		case <-s.bg.Done():
			if left := len(s.outbox); left > 0 {
				s.logf("%d notifications of the client were not forwarded to MCP server %s: the session ended", left, s.logURL)
			}
			return
		}
	}
}

func (s *Session) notify(ctx context.Context, method string, params json.RawMessage) error {
	return s.send(ctx, method, jsonrpc.Notification(method, params))
}

// send POSTs a notification or a response, which the server acknowledges with 202.
func (s *Session) send(ctx context.Context, what string, msg []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, sent, err := s.post(ctx, msg)
	if err != nil {
		if !sent {
			return fmt.Errorf("%w: %s to MCP server %s: %w", mcpstdio.ErrNotSent, what, s.logURL, err)
		}
		return fmt.Errorf("httpback: %s to MCP server %s: %w", what, s.logURL, err)
	}
	defer resp.Body.Close()
	if err := s.status(resp, what, cancel); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

// get opens a GET event stream (lastID: resume after that event).
func (s *Session) get(ctx context.Context, lastID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	s.headers(req)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set(headerLastEventID, lastID)
	}
	resp, err := s.do(req)
	if err != nil {
		return nil, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
		resp.Body.Close()
		return nil, &StatusError{Method: "GET", Status: resp.StatusCode, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	}
	return resp, nil
}

// listen keeps a GET stream for the server's own messages open while the session lives.
//
// A stream that ended is resumed (Last-Event-ID) when it gave event ids. A server may accept a
// resumption and never feed it: server-everything's event store makes the TypeScript SDK file
// the resumed stream under an event's id, not the session's stream's, so it replays what it
// stored and then writes nothing more there, holding what it sends the session for a stream it
// no longer has (docs/gateway-backend.md). So once a resumption is accepted, a fresh stream
// (no Last-Event-ID) is asked for beside it: a server that fed the resumption holds it as the
// session's stream and refuses the fresh one (409), and the resumption goes on alone; one that
// did not gives the fresh stream, which is then the session's, while the resumption is read
// until it ends, or until the next one replaces it. Before 2026-12-07 every message the server
// sent the session after such a cut was lost (TestEverythingGETStreamAfterAResumptionNeverFed).
// A message both carry is delivered once: the resumption's are replayed (replayedNote,
// askedBefore).
//
// The stream is asked for again a getRetry after it ended or was refused, twice as long after
// each round that brought no event, up to getBackoffMax (a server's Retry-After counts, up to
// maxRetryAfter). Before 2026-12-07 it was asked again every second for the session's life,
// whatever the server answered (TestGETStreamBacksOffWhileRefused). It is never given up while the server may pass (a session's stream, not
// a call's: a stream cut twice at the same event ends a call, never the session's stream).
func (s *Session) listen() {
	defer s.wg.Done()
	var side *getStream // a resumption the fresh stream took over from, still read
	defer func() {
		if side != nil {
			side.stop()
		}
	}()
	lastID := ""
	wait := getRetry
	// The stream's reconnection time (the SSE retry field its last stream sent: a client MUST
	// wait it before it reconnects), up to maxRetryAfter.
	var reconnect time.Duration
	for s.bg.Err() == nil {
		resumed := lastID != ""
		resp, err := s.get(s.bg, lastID)
		var se *StatusError
		if errors.As(err, &se) {
			if s.streamed.Load() && (se.Status == http.StatusNotFound || se.Status == http.StatusBadRequest) && s.ID() != "" {
				if lastID != "" {
					// The server may only not know the event any more (an event store that
					// dropped it answers 400): ask for a new stream, without resuming.
					lastID = ""
					continue
				}
				// The server gave this session a stream before and now refuses it a new one:
				// it no longer knows the session (it restarted; servers built on the
				// TypeScript SDK's example answer 400, the transport says 404). Retired now,
				// the next request opens a new session instead of reaching the lost one,
				// whose 400 would leave a fenced call unknown. Calls under way go on.
				s.logf("MCP server %s refused to reopen the session's GET stream (HTTP %d): it no longer knows the session; the next request opens a new one", s.logURL, se.Status)
				s.retire(errSessionGone)
				return
			}
			// A 404 to a first GET may only mean that no GET stream is offered; a POST finds
			// out whether the session is gone. A 409 to a stream opened again is the server
			// still holding the one it gave before, cut on our side only (it has not seen the
			// cut yet): that passes, so it is asked again. Before 2026-12-06 the stream was
			// given up for the session's life, and every later message the server sent on it
			// was lost (TestReopenedGETStreamRefusedWhileTheServerHoldsTheOldOne).
			again := se.Status == http.StatusTooManyRequests || se.Status >= 500 || (se.Status == http.StatusConflict && s.streamed.Load())
			if !again {
				return // 405: not offered; 409 to a first GET: one is open already; 200 not SSE, other 4xx: not for us
			}
		}
		if err == nil {
			s.streamed.Store(true)
			// Not watched for quiet spells as a call's resumed stream is (resumedQuiet): a
			// session's stream is quiet for long as a rule, and closing it ourselves behind a
			// proxy that does not pass the close on kept a healthy server answering 409 to
			// every GET after it, losing what it sent (found in review, 2026-12-07: 1 of 12
			// log messages delivered, against 12 unwatched).
			cur := s.readGET(resp, lastID)
			if resumed {
				if side != nil {
					side.stop() // an earlier resumption, never fed: this one replays from later on
					side = nil
				}
				if f := s.fresh(cur); f != nil {
					side, cur = cur, s.readGET(f, "")
				}
			}
			select {
			case <-cur.done:
			case <-s.bg.Done():
				cur.stop()
				return
			}
			next, brought := cur.result()
			if next == "" && side != nil {
				next, _ = side.result()
			}
			if cur.retry > 0 {
				reconnect = cur.retry
			}
			lastID = next
			if errors.Is(cur.err, ErrTooLarge) {
				// Reopening would replay the same event: give the stream up.
				s.logf("GET event stream of MCP server %s: %v; not reading it any more", s.logURL, cur.err)
				return
			}
			if brought || time.Since(cur.began) >= getBackoffMax {
				wait = getRetry
			}
		}
		select {
		case <-s.bg.Done():
			return
		case <-time.After(max(retryDelay(err, wait), min(reconnect, maxRetryAfter))):
		}
		wait = min(2*wait, getBackoffMax)
	}
}

// getBackoffMax bounds the wait before the session's GET stream is asked for again, and
// freshTries the GETs of a fresh stream asked for beside a resumption.
const (
	getBackoffMax = 30 * time.Second
	freshTries    = 5
)

// fresh asks for a new GET stream (no Last-Event-ID) beside the resumption res, which the
// server accepted: nil when the server refuses it (a server that holds res as the session's
// stream answers 409), when res ended meanwhile (the next round resumes again), or when the
// session ended. A refusal that may pass is asked again, twice as long apart each time (from
// getRetry, or the server's Retry-After), up to freshTries GETs: a server that never fed res
// may still hold the stream cut before it, until it sees that one end.
func (s *Session) fresh(res *getStream) *http.Response {
	wait := getRetry
	for try := 1; ; try++ {
		resp, err := s.get(s.bg, "")
		if err == nil {
			return resp
		}
		if try == freshTries || !mayPass(err) {
			return nil
		}
		select {
		case <-s.bg.Done():
			return nil
		case <-res.done:
			return nil
		case <-time.After(retryDelay(err, wait)):
		}
		wait *= 2
	}
}

// getStream is one GET event stream of the session, read on its own goroutine (of s.wg)
// until it ends.
type getStream struct {
	body  io.Closer
	began time.Time
	done  chan struct{} // closed once it ended; err then says how
	err   error

	mu      sync.Mutex
	lastID  string // the id to resume after
	brought bool   // an event came
	// retry is the stream's reconnection time (an SSE retry field; 0: none came), read once
	// done is closed.
	retry time.Duration
}

// readGET reads the GET stream resp, resumed after lastID ("" for a fresh one), into the
// delivery queue.
func (s *Session) readGET(resp *http.Response, lastID string) *getStream {
	g := &getStream{body: resp.Body, began: time.Now(), done: make(chan struct{}), lastID: lastID}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(g.done)
		defer resp.Body.Close()
		meter := newMeter(s.bg, resp.Body, 0)
		defer meter.next()
		id := lastID
		_, g.err = s.pump(s.bg, meter, nil, &id, lastID != "", func() {
			g.mu.Lock()
			g.lastID, g.brought = id, true
			g.mu.Unlock()
		}, &g.retry)
	}()
	return g
}

// result is the id to resume the stream after, and whether it brought an event.
func (g *getStream) result() (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastID, g.brought
}

// stop closes the stream; its reader ends.
func (g *getStream) stop() { _ = g.body.Close() }

// maxRetryAfter bounds how long a server's Retry-After makes a GET wait.
const maxRetryAfter = 30 * time.Second

// retryDelay is how long to wait before asking again after err: d, or the Retry-After of the
// server's answer when that is longer, up to maxRetryAfter. Before 2026-12-07 Retry-After was
// ignored and a server that asked for a minute was asked again every second.
func retryDelay(err error, d time.Duration) time.Duration {
	var se *StatusError
	if errors.As(err, &se) && se.retryAfter > d {
		return min(se.retryAfter, maxRetryAfter)
	}
	return d
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date (0: none, or past).
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Close ends the session with DELETE (at most 2 s). Calls in flight fail ("may have run").
func (s *Session) Close() error { return s.stop(closeGrace, true) }

// CloseWithin is Close with a budget for the DELETE.
func (s *Session) CloseWithin(d time.Duration) error { return s.stop(d, true) }

// Kill ends the session at once, without DELETE.
func (s *Session) Kill() error { return s.stop(0, false) }

func (s *Session) stop(within time.Duration, del bool) error {
	s.closeM.Lock()
	if s.closed {
		s.closeM.Unlock()
		return nil
	}
	s.closed = true
	s.closeM.Unlock()
	s.end(errors.New("httpback: session closed"))
	s.wg.Wait()
	if !del || s.ID() == "" || within <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.url, nil)
	if err != nil {
		return err
	}
	s.headers(req)
	resp, err := s.do(req)
	if err != nil {
		return fmt.Errorf("httpback: DELETE of the session at MCP server %s: %w", s.logURL, err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode < 300, resp.StatusCode == http.StatusMethodNotAllowed, resp.StatusCode == http.StatusNotFound:
		return nil
	}
	return fmt.Errorf("httpback: DELETE of the session at MCP server %s: HTTP %d", s.logURL, resp.StatusCode)
}

// sameID says whether a server's answer names the request id: by the id's value, as JSON-RPC
// has the server answer (7.0 names 7, as a JSON library that reads every number as a double
// writes it; MCP's SDK clients compare ids so).
func sameID(answer, id json.RawMessage) bool {
	return len(answer) > 0 && jsonrpc.IDKey(answer) == jsonrpc.IDKey(id)
}
