// Package httpfront is the Streamable HTTP front of the proxy core (docs/proxy-core.md): it
// serves MCP over HTTP on one endpoint (POST a message, GET a stream of the server's messages,
// DELETE to end a session), one wrap.Proxy per MCP session, and frames what each proxy sends
// to its agent as a JSON body or as server-sent events.
//
// It decides nothing about fencing. What it owns:
//   - Sessions: an initialize without Mcp-Session-Id opens one (a new proxy, and so a new back:
//     a child or an upstream session per MCP session, since servers keep per-session state);
//     every later message names it. Unknown ids get 404 (the client starts over), a session
//     belongs to the principal that opened it.
//   - Who is calling: a bearer key (Keys) names the principal; or, with PassAuth, the client's
//     Authorization goes to the upstream and a hash of it is the principal. The proxy factory
//     puts the principal into the intents' scope.
//   - DNS-rebinding protection: a request with an Origin header not allowed is refused (403),
//     and on a loopback listener a Host that is not a loopback name is refused too.
//   - Routing: a response goes to the POST that carried its request; a progress notification
//     to the stream of the request whose progressToken it carries; other notifications and the
//     server's requests to the newest open request stream, else to the GET stream.
//
// A broken response stream is not a cancellation: the proxy's request goes on and its outcome
// is recorded; the client re-sends the call (with a new id) and receives the recorded result.
// Until the proxy answers it, the request keeps its id in the session: the same body POSTed
// again under that id waits for that answer, and another request under it is refused.
// SSE events carry no ids: there is no replay buffer, so there is nothing to resume.
package httpfront

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/internal/budget"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcpheader"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Defaults of Config.
const (
	DefaultPath        = "/mcp"
	DefaultMaxSessions = 256
	DefaultIdle        = 30 * time.Minute
	// DefaultBodyTimeout bounds how long a request's body may take to arrive: 64 MiB (the
	// largest message) at about 1 MB/s, and any MCP message of usual size on any link.
	DefaultBodyTimeout = time.Minute
	// keepAlive is how often an idle SSE stream gets a comment, so proxies keep it open.
	keepAlive = 25 * time.Second
)

// Caller is who opened a session, as the front established it.
type Caller struct {
	// Principal is "" without listener auth, a key's name ("key:<name>"), or with PassAuth a
	// hash of the client's Authorization ("auth:<hex>"). Never a secret.
	Principal string
	// Header holds what must reach the upstream for this caller: the client's Authorization
	// under PassAuth. Never logged.
	Header http.Header
}

// Config configures a Handler.
type Config struct {
	// Path is the MCP endpoint (default DefaultPath).
	Path string
	// NewSession makes the proxy of a new MCP session for who. Required. The handler Attaches
	// it, Dispatches to it and Stops it.
	NewSession func(who Caller) (*wrap.Proxy, error)
	// Keys maps a bearer token to its principal's name. Empty: no listener auth (then bind to
	// loopback only, which the command enforces).
	Keys map[string]string
	// PassAuth passes the client's Authorization to the upstream and uses its hash as the
	// principal. With Keys too, the key is checked first and the principal is the key's.
	PassAuth bool
	// AllowOrigins lists the Origin values accepted besides the loopback origins ("*" accepts
	// any; for a listener behind a proxy that checks Origin itself).
	AllowOrigins []string
	// Loopback says the listener is bound to a loopback address: Host must then be a loopback
	// name too (DNS rebinding).
	Loopback bool
	// MaxSessions bounds the open sessions (default DefaultMaxSessions); an initialize beyond
	// it gets 503.
	MaxSessions int
	// MaxSessionsPerPrincipal bounds the sessions one principal may hold (0: MaxSessions
	// alone bounds them); an initialize beyond it gets 429. Without it one client that opens
	// sessions in a loop (a runaway agent, a leak) takes every place under MaxSessions, and
	// every other principal's initialize is refused until those sessions idle out.
	MaxSessionsPerPrincipal int
	// Idle closes a session without requests for this long (default DefaultIdle).
	Idle time.Duration
	// BodyTimeout bounds the time from a request's handling to the end of its body (default
	// DefaultBodyTimeout): a client that sends its body too slowly (or a body a refused
	// request never reads, which the server still drains) has its connection cut, and a POST
	// whose body did not arrive in time gets 408 and runs nothing. The bound ends once the
	// body is read: a response streamed for as long as a call runs is not cut by it. It needs
	// a ResponseWriter that supports http.ResponseController's SetReadDeadline (one that
	// wraps the server's must have Unwrap); without one there is no bound.
	BodyTimeout time.Duration
	// Log receives one line per notable event. Required.
	Log io.Writer
	// OnSession, when set, is told when a session opens (+1) and closes (-1): for metrics.
	OnSession func(delta int)
	// Observe, when set, is told of each tools/call the front refuses itself, before its
	// session's proxy sees it (its Mcp-Method, Mcp-Name or Mcp-Param-* headers disagree with
	// it, or another request of the session holds its id): outcome "invalid", nothing ran.
	// The proxy tells its Options.Observe of every other tools/call; give both one function.
	Observe func(wrap.CallEvent)
}

// Handler serves the MCP endpoint.
type Handler struct {
	cfg Config

	mu       sync.Mutex
	sessions map[string]*session
	// ending holds the sessions being stopped (end), out of sessions but not yet stopped: a
	// Kill or InFlight during a stop must still reach them.
	ending   map[*session]struct{}
	closed   bool
	stop     chan struct{}
	reaper   sync.WaitGroup
	stopping sync.WaitGroup // sessions being stopped
}

// New returns a Handler; Close ends its sessions.
func New(cfg Config) (*Handler, error) {
	if cfg.NewSession == nil || cfg.Log == nil {
		return nil, errors.New("httpfront: NewSession and Log are required")
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultIdle
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	h := &Handler{cfg: cfg, sessions: map[string]*session{}, ending: map[*session]struct{}{}, stop: make(chan struct{})}
	h.reaper.Add(1)
	go h.reap()
	return h, nil
}

func (h *Handler) logf(format string, a ...any) {
	fmt.Fprintln(h.cfg.Log, "effectfence wrap --listen: "+safetext.Escape(fmt.Sprintf(format, a...)))
}

// BodyTimeout is Config.BodyTimeout, its default applied.
func (h *Handler) BodyTimeout() time.Duration { return h.cfg.BodyTimeout }

// Sessions is the number of open sessions.
func (h *Handler) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Close ends every session: each proxy gets its grace for calls in flight, then its back is
// closed and what it still held is recorded as unknown (wrap.Proxy.Stop). It returns when all
// are stopped.
func (h *Handler) Close(why string) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.stopping.Wait()
		return
	}
	h.closed = true
	close(h.stop)
	all := make([]*session, 0, len(h.sessions))
	for id, s := range h.sessions {
		all = append(all, s)
		delete(h.sessions, id)
	}
	for _, s := range all {
		h.end(s, why)
	}
	h.mu.Unlock()
	h.reaper.Wait()
	h.stopping.Wait()
}

// end stops a session's proxy on its own goroutine; h.mu is held. Until it is stopped the
// session is in ending, where Kill and InFlight find it.
func (h *Handler) end(s *session, why string) {
	h.stopSession(s, why, true)
}

// discard is end for a session that was never opened (open refused it after making its
// proxy): tracked the same way, but it was never counted as open; h.mu is held.
func (h *Handler) discard(s *session, why string) {
	h.stopSession(s, why, false)
}

// stopSession stops s's proxy on a goroutine that Close waits for; h.mu is held. counted
// says OnSession was told that s opened.
func (h *Handler) stopSession(s *session, why string, counted bool) {
	h.stopping.Add(1)
	h.ending[s] = struct{}{}
	go func() {
		defer h.stopping.Done()
		stopProxy(s.proxy, why) // answers what it can (an abandoned fenced call: unknown) first
		s.close()
		h.mu.Lock()
		delete(h.ending, s)
		h.mu.Unlock()
		if counted && h.cfg.OnSession != nil {
			h.cfg.OnSession(-1)
		}
	}()
}

// stopProxy stops a session's proxy: wrap.Proxy.Stop (a variable so tests can see when it
// runs and ends).
var stopProxy = func(p *wrap.Proxy, why string) { p.Stop(why) }

func (h *Handler) reap() {
	defer h.reaper.Done()
	// A quarter of the limit, within [1ms, 1m]: an Idle under 4ns (--session-idle 1ns) made
	// it zero, and the ticker's panic took the gateway down at start (before 2026-12-04).
	every := min(max(h.cfg.Idle/4, time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-t.C:
			h.mu.Lock()
			for id, s := range h.sessions {
				if s.idleSince(now) > h.cfg.Idle {
					delete(h.sessions, id)
					h.logf("session %s idle for %s: closed", short(id), h.cfg.Idle)
					h.end(s, "the session was idle")
				}
			}
			h.mu.Unlock()
		}
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// ServeHTTP serves the endpoint.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The server bounds the headers only (ReadHeaderTimeout); the body is bounded here, and the
	// bound lifted once it is read (post, get), since a read deadline left in place would also
	// end a long response: the server's background read that watches for the client hanging
	// up would hit it and cancel the request.
	rc := http.NewResponseController(w)
	bodyUntil := time.Now().Add(h.cfg.BodyTimeout)
	_ = rc.SetReadDeadline(bodyUntil) // unsupported: no bound
	if r.URL.Path != h.cfg.Path {
		http.NotFound(w, r)
		return
	}
	if msg := h.checkOrigin(r); msg != "" {
		httpError(w, http.StatusForbidden, msg)
		return
	}
	who, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	if v := r.Header.Get("MCP-Protocol-Version"); v != "" && !versionRE.MatchString(v) {
		httpError(w, http.StatusBadRequest, "unsupported MCP-Protocol-Version")
		return
	}
	switch r.Method {
	case http.MethodPost:
		h.post(w, r, who, rc, bodyUntil)
	case http.MethodGet:
		h.get(w, r, who, rc)
	case http.MethodDelete:
		h.delete(w, r, who)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		httpError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

var versionRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

// httpError answers a refused HTTP request with a JSON-RPC error body (id null), which MCP
// clients show, and the status.
func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(jsonrpc.ErrorResponse(nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "effectfence: " + msg}))
}

// Guard serves next only to requests the endpoint would accept by their Origin and Host (DNS
// rebinding protection), and refuses the others with 403 as the endpoint does: for the other
// paths of the same listener (/healthz, /metrics), which a page rebound to a loopback address
// could otherwise read.
func (h *Handler) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := h.checkOrigin(r); msg != "" {
			httpError(w, http.StatusForbidden, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkOrigin returns why the request is refused, or "".
func (h *Handler) checkOrigin(r *http.Request) string {
	if h.cfg.Loopback && !loopbackHost(r.Host) {
		return "Host is not a loopback name on a loopback listener (DNS rebinding protection)"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return "" // not a browser
	}
	for _, o := range h.cfg.AllowOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return ""
		}
	}
	if u, err := url.Parse(origin); err == nil && (u.Scheme == "http" || u.Scheme == "https") && loopbackHost(u.Host) {
		// A page served from this machine; on a loopback listener it is the same trust.
		if h.cfg.Loopback {
			return ""
		}
	}
	return "Origin not allowed (DNS rebinding protection; allow it with --allow-origin)"
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authenticate establishes the caller, or answers 401 and returns false.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (Caller, bool) {
	authz := r.Header.Get("Authorization")
	var who Caller
	if len(h.cfg.Keys) > 0 {
		token, ok := bearer(authz)
		name := ""
		if ok {
			for k, n := range h.cfg.Keys {
				if subtle.ConstantTimeCompare([]byte(k), []byte(token)) == 1 {
					name = n
				}
			}
		}
		if name == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="effectfence"`)
			httpError(w, http.StatusUnauthorized, "a valid bearer key is required")
			return who, false
		}
		who.Principal = "key:" + name
	}
	if h.cfg.PassAuth && authz != "" {
		who.Header = http.Header{"Authorization": {authz}}
		if who.Principal == "" {
			// The principal is the credentials, not their spelling: "bearer  T" is the
			// token of "Bearer T", one caller and one account upstream, so its retry is a
			// duplicate. "Bearer T" keeps the hash it always had.
			cred := authz
			if token, ok := bearer(authz); ok {
				cred = "Bearer " + token
			}
			sum := sha256.Sum256([]byte(cred))
			who.Principal = "auth:" + hex.EncodeToString(sum[:8])
		}
	}
	return who, true
}

// bearer returns the token of an Authorization header of the Bearer scheme, whose name is
// case-insensitive and followed by one or more spaces (RFC 9110, 11.1 and 11.4): "bearer
// TOKEN" and "Bearer  TOKEN" are as good as "Bearer TOKEN".
func bearer(authz string) (string, bool) {
	if len(authz) < 7 || !strings.EqualFold(authz[:6], "Bearer") || authz[6] != ' ' {
		return "", false
	}
	return strings.TrimLeft(authz[7:], " "), true
}

// lookup finds the session the request names, answering the error itself when it cannot.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, who Caller) *session {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		httpError(w, http.StatusBadRequest, "Mcp-Session-Id is required (send initialize first)")
		return nil
	}
	h.mu.Lock()
	s := h.sessions[id]
	h.mu.Unlock()
	if s == nil || s.who.Principal != who.Principal {
		// Another principal's session is as unknown to this caller as a closed one.
		httpError(w, http.StatusNotFound, "unknown or closed session: initialize again")
		return nil
	}
	return s
}

// maxBody bounds one POST body (the proxy's bound on one message).
const maxBody = wrap.MaxMessage

// maxBacklog bounds the bytes queued for one open stream that its client has not read yet (a
// client that keeps a stream open without reading it, or a connection that died silently).
// A message is always queued on an empty stream, so any message the proxy takes fits. A
// stream whose backlog would pass the bound is ended and its backlog dropped, as when the
// client hangs up: what it held is lost, as MCP says a broken stream's messages are.
var maxBacklog = wrap.MaxMessage

// BacklogBudget bounds the bytes queued for unread streams across every session, beyond the
// first freeBacklog bytes of each stream's backlog: a stream whose backlog would take more of
// it than is free is ended as one past maxBacklog is, its backlog dropped. maxBacklog alone
// bounds one stream: a client that opened streams and read none of them (requests whose
// progress it asked for, a GET stream per session) made the gateway hold up to 64 MiB for each
// for as long as writeTimeout let its writes hang, so eight of them could take half a
// gigabyte and more without end (TestBacklogsShareOneBudget). A stream whose client reads
// keeps a backlog far under freeBacklog and never touches it.
const BacklogBudget = 256 << 20

// backlogs is the process's BacklogBudget; freeBacklog how much of a stream's backlog it does
// not count (variables so tests can lower them).
var (
	backlogs    = budget.NewPool(BacklogBudget)
	freeBacklog = 1 << 20
)

// writeTimeout bounds each part (writeChunk) of a write to a client: a client that keeps a
// stream open but stops reading fills the socket's buffers, and the write that then blocks
// would hold the stream (its goroutine and connection) until TCP gave up. Past it the stream
// ends, as when its backlog passes maxBacklog. A variable so tests can lower it.
var writeTimeout = time.Minute

// RequestBudget bounds the memory the requests the front holds take, across every session.
// Every body is charged requestCost times its length (see bodyMeter: as it arrives, then at
// once its Content-Length, or 64 MiB without one, cut to its length once read) from its first
// byte until its answer is sent, or, when its client hangs up first, until the proxy has served it
// (the call goes on, holding its message; before 2026-12-06 the room was given back at the
// hang-up, so a client that hung up after each large call held any number of them).
// Recording a call whose arguments are 60 MiB took about 1.7 GB and a minute; eight at once,
// unbounded, could exhaust a host's memory. Before 2026-12-06 a body of up to 1 MiB was not
// charged at all: 300 calls of 1000 KiB at once took a real gateway to 1.9 GB resident. A
// body that finds no room within --body-timeout is refused with 503, unread: nothing ran.
const RequestBudget = 128 << 20

// requestCost is what a body is charged per byte while it is held: the copies of it alive
// then (the body read, the message the proxy decodes from it, the canonical arguments it
// fingerprints and records, the line it writes to the server). What a held call takes of the
// process is more (the garbage collector's slack, the ledger's work: 300 calls of 600 KiB held
// at once took 2 GB resident, about 11 times their length), so the budget bounds the memory
// to a multiple of itself (a flood of such calls now peaks near 300 MB), not to 128 MiB.
const requestCost = 4

// smallRequest is the longest body that may take the part of the budget kept for small ones
// (smallReserve): a body longer than it leaves that part free, so ordinary calls, a few KiB
// each, do not wait while large ones fill the budget.
const (
	smallRequest = 64 << 10
	smallReserve = 32 << 20
)

// wholeAfter is how much of a long body is charged as it arrives (see bodyMeter); past it,
// the body is charged at once for its whole length.
const wholeAfter = 1 << 20

// requests is the process's RequestBudget (a variable so tests can lower it).
var requests = budget.NewPool(RequestBudget)

// errBusy ends the read of a body that found no room in the budget.
var errBusy = errors.New("no room for another message")

// bodyMeter reads a body, taking its charge of the budget before the bytes it reads. Up to
// smallRequest the charge follows what arrives, and so it does up to wholeAfter for a body
// longer than that or of no declared length: a client that declares a length and sends little
// holds little (charged at its declared length, a connection that declared 64 MiB and sent
// 64 KiB held all the room of bodies over 64 KiB for a --body-timeout). Past that, a body is
// charged at once for its whole length (its Content-Length, or maxBody without one), and so
// is a body that declares at most wholeAfter, once past smallRequest: bodies sharing the
// budget then do not each hold part of it waiting for the rest, as growing charges do (300
// calls of 1000 KiB at once, charged as they arrived, were 120 run, 180 refused 503 or 408;
// charged at once, 255 to 300 run).
type bodyMeter struct {
	pool *budget.Pool // requests, but in tests
	ctx  context.Context
	r    io.Reader
	// The meter waits for room until until (the body's bound), or when until is zero for
	// wait at each take. waited is how long it waited in all.
	wait       time.Duration
	until      time.Time
	waited     time.Duration
	size       int64 // the body's Content-Length (at most maxBody), or -1
	read, held int64
	whole      bool // charged for its whole length
}

func (m *bodyMeter) Read(p []byte) (int, error) {
	upTo := m.read + int64(len(p)) // what the body may be once this read is done
	if m.size >= 0 {
		upTo = min(upTo, m.size)
	}
	ok := true
	switch {
	case m.whole:
	case upTo <= smallRequest:
		ok = m.take(upTo)
	case m.size >= 0 && m.size <= wholeAfter:
		ok, m.whole = m.take(m.size), true
	case upTo <= wholeAfter:
		ok = m.take(upTo)
	case m.size >= 0:
		ok, m.whole = m.take(m.size), true
	default:
		ok, m.whole = m.take(maxBody), true // cut to its length once read (trim)
	}
	if !ok {
		return 0, errBusy
	}
	n, err := m.r.Read(p)
	m.read += int64(n)
	return n, err
}

// take raises what the meter holds to the charge of a body of n bytes, waiting for room up to
// its wait; a body longer than smallRequest leaves smallReserve free, and is charged at most
// the budget but twice smallReserve: small bodies may hold as much again beside it (they may
// take any part of the budget). Charged up to all the budget but the reserve, a body of 24 MiB
// or more, or one past 1 MiB without a Content-Length, waited until no other request held
// any of the budget: one small call running a slow tool kept it waiting out --body-timeout,
// and it was refused 503 (TestLargeBodyWaitsOnlyForLargeOnes).
func (m *bodyMeter) take(n int64) bool {
	reserve, most := int64(0), m.pool.Total()
	if n > smallRequest {
		reserve, most = smallReserve, m.pool.Total()-2*smallReserve
	}
	c := min(requestCost*n, most)
	if c > m.held {
		wait := m.wait
		if !m.until.IsZero() {
			// Each take waits only for what is left of the body's bound: given a fresh
			// wait each, a body that grew past a first charge could wait for room past
			// the bound, and then meet the read deadline and be told it arrived too late.
			wait = time.Until(m.until)
		}
		ok, waited := m.pool.AcquireLeavingWaited(m.ctx, c-m.held, reserve, max(wait, 0))
		m.waited += waited
		if !ok {
			return false
		}
	}
	m.held = max(m.held, c)
	return true
}

// trim gives back what the meter holds beyond the charge of the body read, n bytes long (a
// body without a Content-Length was charged for the most it could be).
func (m *bodyMeter) trim(n int64) {
	if over := m.held - requestCost*n; over > 0 {
		m.pool.Release(over)
		m.held -= over
	}
}

func (h *Handler) post(w http.ResponseWriter, r *http.Request, who Caller, rc *http.ResponseController, bodyUntil time.Time) {
	if !isJSON(r) {
		w.Header().Set("Connection", "close") // the body is not read
		httpError(w, http.StatusUnsupportedMediaType, "a POST needs Content-Type: application/json (one JSON-RPC message); nothing ran")
		return
	}
	if r.ContentLength > maxBody {
		w.Header().Set("Connection", "close") // the body is not read
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("message longer than %d bytes refused", maxBody))
		return
	}
	meter := &bodyMeter{pool: requests, ctx: r.Context(), r: http.MaxBytesReader(w, r.Body, maxBody), wait: h.cfg.BodyTimeout, until: bodyUntil, size: r.ContentLength}
	defer func() { requests.Release(meter.held) }()
	body, err := io.ReadAll(meter)
	meter.trim(int64(len(body)))
	if err != nil {
		var tooBig *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.Is(err, errBusy), errors.As(err, &ne) && ne.Timeout() && meter.waited > 0:
			// A body that waited for room and then ran out of its bound is the gateway's
			// doing as much as its sender's: before, it got 408 saying the body did not
			// arrive in time, which sent its operator after a slow client.
			w.Header().Set("Connection", "close") // the rest of the body is not read
			w.Header().Set("Retry-After", "1")
			httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("the gateway holds as many messages as its memory budget allows (%d MiB, a message counting %d times its length) and this one waited %s of its %s bound (--body-timeout) for room: it was NOT read whole and nothing ran; send it again", requests.Total()>>20, requestCost, meter.waited.Round(time.Millisecond), h.cfg.BodyTimeout))
		case errors.As(err, &tooBig):
			httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("message longer than %d bytes refused", maxBody))
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			httpError(w, http.StatusRequestTimeout, fmt.Sprintf("the body did not arrive within %s (--body-timeout): this message was NOT run; send it again", h.cfg.BodyTimeout))
		default:
			httpError(w, http.StatusBadRequest, "cannot read the body")
		}
		return
	}
	// The body is in: the answer may take as long as the call. (The server lifts the deadline
	// too when it starts watching for the client hanging up, at the body's end.)
	_ = rc.SetReadDeadline(time.Time{})
	m, err := jsonrpc.Parse(body)
	if err != nil {
		code, status := jsonrpc.CodeInvalidRequest, http.StatusBadRequest
		if !json.Valid(body) {
			code = jsonrpc.CodeParseError
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(jsonrpc.ErrorResponse(jsonrpc.ReadableID(body), &jsonrpc.Error{Code: code, Message: fmt.Sprintf("effectfence: cannot parse the message: %v (one JSON-RPC message per POST; batches are not supported)", err)}))
		return
	}
	read := time.Now()
	if why := mcpheader.Check(r.Header, m); why != "" {
		// An edge before the gateway may have routed or authorised the request by its
		// headers: the body must not run another method or tool than they name.
		h.refusedCall(m, read)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: mcpheader.CodeMismatch, Message: "effectfence: " + why}))
		return
	}
	var s *session
	opened := false
	if m.IsRequest() && m.Method == "initialize" && r.Header.Get("Mcp-Session-Id") == "" {
		if s = h.open(w, who); s == nil {
			return
		}
		opened = true
		w.Header().Set("Mcp-Session-Id", s.id)
		// A session whose server failed to start holds nothing but the reason, which its
		// answer carried: it is closed, or each retried initialize (a new session) would hold
		// a place under MaxSessions until it was idle, refusing every client meanwhile.
		defer h.closeIfStartFailed(s)
	} else if v, unspoken := wrap.UnspokenRevision(m.Params); unspoken && m.IsRequest() && r.Header.Get("Mcp-Session-Id") == "" {
		// A request of stateless MCP (2026-07-28: no initialize, no session) is told which
		// revisions the gateway speaks, as MCP says (400 and -32022 listing them), so a client
		// that speaks an earlier one too sends initialize; before, it got "Mcp-Session-Id is
		// required", which a client speaking only 2026-07-28 reported as "no modern evidence".
		h.refusedCall(m, read)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(wrap.RevisionError(m.ID, v))
		return
	} else if s = h.lookup(w, r, who); s == nil {
		return
	}
	s.touch()
	if !h.paramsAgree(w, r, s, m) {
		h.refusedCall(m, read)
		return
	}
	if !m.IsRequest() {
		s.proxy.Dispatch(body)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	sse := acceptsSSE(r)
	st, adopted, ok := s.register(m, body, sse, meter.held)
	if ok {
		meter.held = 0 // the stream holds it now: until the proxy has served the request
	}
	if !ok {
		h.refusedCall(m, read)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "effectfence: a request with this id is already in progress in this session"}))
		return
	}
	defer s.unregister(st)
	if !adopted { // an adopted request is being served already: it waits for that answer
		s.proxy.Dispatch(body)
	}
	var answered bool
	if sse {
		answered = s.streamTo(w, r, st, true)
	} else {
		answered = s.writeAnswer(w, r, st, rc)
	}
	if opened && !answered {
		h.closeUnanswered(s)
	}
}

// refusedCall tells Config.Observe of m, refused by the front since its body was read (at
// since), when m is a tools/call: the proxy never sees it, so before 2026-12-07 such a call was
// counted nowhere, and effectfence_tool_calls_total showed no invalid call while every call of
// a client whose headers disagreed with its bodies was refused.
func (h *Handler) refusedCall(m *jsonrpc.Message, since time.Time) {
	if h.cfg.Observe == nil || m.Method != "tools/call" || !m.IsRequest() {
		return
	}
	tool, _ := mcpheader.Target(m.Method, m.Params)
	h.cfg.Observe(wrap.CallEvent{Tool: tool, Outcome: "invalid", Elapsed: time.Since(since)})
}

// closeUnanswered ends the session s, opened by an initialize whose answer (and with it the
// session's id) never reached its client: nobody can name it, so it would hold its server and
// a place under MaxSessions until it was idle (before 2026-12-04 it did). Its server gets the
// grace for the initialize in flight, as any stopped session's does.
func (h *Handler) closeUnanswered(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions[s.id] == s {
		delete(h.sessions, s.id)
		h.logf("session %s: the client hung up before its initialize was answered: closed", short(s.id))
		h.end(s, "the client hung up before its initialize was answered")
	}
}

// paramsAgree checks the Mcp-Param-* headers of a tools/call (SEP-2243) against its arguments,
// by the tool's inputSchema as the server listed it, and refuses the request (HTTP 400,
// -32020; nothing runs) when they disagree, or when a client speaking 2026-07-28 or later left
// out the header of an argument it gives. It reports whether the request may go on. Other
// requests, and tools/calls of older clients that carry no such header, pass unlooked-at.
func (h *Handler) paramsAgree(w http.ResponseWriter, r *http.Request, s *session, m *jsonrpc.Message) bool {
	if m.Method != "tools/call" {
		return true
	}
	required := mcpheader.Requires(r.Header.Get("MCP-Protocol-Version"))
	if !required && !mcpheader.HasParamHeaders(r.Header) {
		return true
	}
	refuse := func(why string) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: mcpheader.CodeMismatch, Message: "effectfence: " + why}))
		return false
	}
	name, ok := mcpheader.Target(m.Method, m.Params)
	if !ok {
		return true // no tool named: the proxy refuses it as it is
	}
	params, err := s.proxy.ParamHeaders(r.Context(), name)
	if err != nil {
		return refuse(fmt.Sprintf("the Mcp-Param-* headers cannot be checked: the server's tool list could not be read (%v); nothing ran", err))
	}
	if why := mcpheader.CheckParams(r.Header, params, m, required); why != "" {
		return refuse(why)
	}
	return true
}

// closeIfStartFailed ends s if its server failed to start, once the initialize was answered.
func (h *Handler) closeIfStartFailed(s *session) {
	if !s.proxy.StartFailed() {
		return
	}
	h.mu.Lock()
	if h.sessions[s.id] == s {
		delete(h.sessions, s.id)
		h.logf("session %s: the MCP server did not start: closed", short(s.id))
		h.end(s, "the MCP server did not start")
	}
	h.mu.Unlock()
}

// isJSON reports whether a POST may be read by its Content-Type: it must say application/json
// (its media type, parameters aside), as MCP's SDK servers require of every POST (the
// TypeScript SDK's, go-sdk's and the Python SDK's answer every other 415), and as every MCP
// client sends. A page may POST a body of another type (text/plain, a form, a Blob without a
// type) to any origin with no CORS preflight: before 2026-12-07 such a request from a page of
// an allowed origin (any loopback one, on a loopback listener) was served, and opened a session
// and its server. Then, for part of that day, only a request carrying Origin was held to it, so a
// browser's POST without Origin (an older browser's form, one whose Origin a privacy extension
// or a proxy strips) still opened sessions, each with its server, on a loopback gateway
// without keys (TestPostWithoutOriginMustBeJSON): the gateway cannot tell it from curl's.
func isJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

func acceptsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/event-stream") {
			return true
		}
	}
	return false
}

// open makes a new session for who, or answers why not and returns nil.
func (h *Handler) open(w http.ResponseWriter, who Caller) *session {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		httpError(w, http.StatusServiceUnavailable, "the gateway is stopping")
		return nil
	}
	if h.full() {
		h.mu.Unlock()
		httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many sessions (%d, open or stopping): try later", h.cfg.MaxSessions))
		return nil
	}
	if h.fullFor(who) {
		h.mu.Unlock()
		h.refuseMine(w)
		return nil
	}
	// Close waits for the session being made: taken before Close can begin (h.closed is
	// false under h.mu), so its Wait sees it, and held until the session is either open
	// (Close ends it) or being stopped (discard, which Close waits for too).
	h.stopping.Add(1)
	defer h.stopping.Done()
	h.mu.Unlock()
	p, err := h.cfg.NewSession(who)
	if err != nil {
		h.logf("cannot open a session: %v", err)
		httpError(w, http.StatusInternalServerError, "cannot open a session")
		return nil
	}
	s := newSession(newID(), who, p)
	p.Attach(s)
	h.mu.Lock()
	if !h.closed && !h.full() && h.fullFor(who) {
		h.discard(s, "too many sessions of its principal")
		h.mu.Unlock()
		h.refuseMine(w)
		return nil
	}
	if h.closed || h.full() {
		// Checked again here: Close, or concurrent initializes that all passed the check
		// above, came meanwhile. The proxy is stopped as a session's is (end), so Close waits
		// for it and Kill reaches it; before 2026-12-04 its Stop ran on a goroutine nothing
		// waited for, which could outlive the gateway's Close.
		closed, why := h.closed, "too many sessions"
		if closed {
			why = "the gateway is stopping"
		}
		h.discard(s, why)
		h.mu.Unlock()
		if closed {
			httpError(w, http.StatusServiceUnavailable, "the gateway is stopping")
		} else {
			httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many sessions (%d, open or stopping): try later", h.cfg.MaxSessions))
		}
		return nil
	}
	h.sessions[s.id] = s
	h.mu.Unlock()
	if h.cfg.OnSession != nil {
		h.cfg.OnSession(+1)
	}
	return s
}

// full says a new session would pass MaxSessions; h.mu is held. A session being stopped
// (DELETE, idle, a failed start) counts until it is: its server runs its calls' grace out, and
// MaxSessions bounds the servers (before 2026-12-04 a client that ended each session with a
// call in it and opened another ran a server per round, past the bound, for the grace).
func (h *Handler) full() bool {
	return len(h.sessions)+len(h.ending) >= h.cfg.MaxSessions
}

// fullFor says a new session of who would pass MaxSessionsPerPrincipal; h.mu is held. Like
// full, a session being stopped counts until it is.
func (h *Handler) fullFor(who Caller) bool {
	limit := h.cfg.MaxSessionsPerPrincipal
	if limit <= 0 {
		return false
	}
	n := 0
	for _, s := range h.sessions {
		if s.who.Principal == who.Principal {
			n++
		}
	}
	for s := range h.ending {
		if s.who.Principal == who.Principal {
			n++
		}
	}
	return n >= limit
}

// refuseMine answers an initialize beyond MaxSessionsPerPrincipal.
func (h *Handler) refuseMine(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "5")
	httpError(w, http.StatusTooManyRequests, fmt.Sprintf("too many sessions of this principal (%d, open or stopping): end one (DELETE) or try later", h.cfg.MaxSessionsPerPrincipal))
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, who Caller, rc *http.ResponseController) {
	if !acceptsSSE(r) {
		httpError(w, http.StatusNotAcceptable, "GET needs Accept: text/event-stream")
		return
	}
	s := h.lookup(w, r, who)
	if s == nil {
		return
	}
	st := s.openGet()
	defer s.closeGet(st)
	_ = rc.SetReadDeadline(time.Time{}) // the stream lasts as long as the session
	s.streamTo(w, r, st, false)
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request, who Caller) {
	s := h.lookup(w, r, who)
	if s == nil {
		return
	}
	h.mu.Lock()
	if h.sessions[s.id] == s {
		delete(h.sessions, s.id)
		h.end(s, "the client ended the session")
	}
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// stream is where messages for one open HTTP response go.
type stream struct {
	id    string        // the request's id (jsonrpc.IDKey); "" for the GET stream
	token string        // the request's progressToken (jsonrpc.IDKey), if any
	sse   bool          // the response is an SSE stream (else only final is used)
	final chan []byte   // the response to the request (buffer 1)
	mu    sync.Mutex    // guards queue, size and over
	queue [][]byte      // notifications and requests routed here, in order
	size  int           // the bytes in queue
	ready chan struct{} // a signal (buffer 1) that queue grew
	gone  chan struct{} // closed when the HTTP response ended
	// stalled is closed when the backlog passed maxBacklog: the stream ends, taking nothing
	// more (over is set).
	stalled chan struct{}
	over    bool
	// charged is what the backlog took of BacklogBudget (its bytes past freeBacklog).
	charged int64
	// replaced is closed when a new GET stream of the session took this one over (a GET
	// stream's only; nil for a request's).
	replaced chan struct{}

	// Guarded by the session's mu: body is the request's POST body; answered says the proxy
	// gave its response, line (or said there is none: nil); orphan says the HTTP response
	// ended before that, so the entry only keeps the id taken (session.register).
	body     []byte
	answered bool
	line     []byte // the response given (nil: none), once answered
	orphan   bool
	// held is the room of RequestBudget the request's body took (post): given back when its
	// POST ends answered, or, for an orphan, once the proxy has answered it, since the proxy
	// holds the message as long as it serves it.
	held int64
	// also are earlier POSTs of this same request under its id, still connected when this
	// one was registered (session.register): they are answered with it.
	also []*stream

	// The session's list of SSE request streams that take other messages (guarded by the
	// session's mu): routed says st is on it, between older and newer.
	older, newer *stream
	routed       bool
}

func newStream(id, token string, sse bool) *stream {
	return &stream{id: id, token: token, sse: sse, final: make(chan []byte, 1), ready: make(chan struct{}, 1), gone: make(chan struct{}), stalled: make(chan struct{})}
}

// push queues line for the client. It returns false, dropping line, when the stream has
// stalled: its backlog would pass maxBacklog (the backlog is then dropped and the stream
// ends), or did before.
func (st *stream) push(line []byte) bool {
	st.mu.Lock()
	if st.over {
		st.mu.Unlock()
		return false
	}
	if st.size > 0 && (st.size+len(line) > maxBacklog || !st.charge(st.size+len(line))) {
		st.over, st.queue, st.size = true, nil, 0
		backlogs.Release(st.charged)
		st.charged = 0
		close(st.stalled)
		st.mu.Unlock()
		return false
	}
	st.queue = append(st.queue, line)
	st.size += len(line)
	st.mu.Unlock()
	select {
	case st.ready <- struct{}{}:
	default:
	}
	return true
}

// charge takes from BacklogBudget what a backlog of size bytes needs beyond what the stream
// holds of it already, without waiting; st.mu is held. It reports whether there was room.
func (st *stream) charge(size int) bool {
	need := int64(size-freeBacklog) - st.charged
	if need <= 0 {
		return true
	}
	if need > backlogs.Total() || !backlogs.Acquire(context.Background(), need, 0) {
		return false
	}
	st.charged += need
	return true
}

func (st *stream) take() [][]byte {
	st.mu.Lock()
	defer st.mu.Unlock()
	q := st.queue
	st.queue, st.size = nil, 0
	backlogs.Release(st.charged)
	st.charged = 0
	return q
}

// Kill ends every session's back at once (wrap.Proxy.Kill), for a gateway that must exit now:
// the open sessions' and those being stopped (a second signal comes during the first one's
// stop, when Close has taken every session out of the open ones; before 2026-12-04 Kill
// reached none of them then, and their servers outlived the gateway).
func (h *Handler) Kill() {
	for _, s := range h.all() {
		s.proxy.Kill()
	}
}

// InFlight describes the requests being served in every session, open or being stopped, for
// a log line.
func (h *Handler) InFlight() []string {
	var out []string
	for _, s := range h.all() {
		for _, c := range s.proxy.InFlight() {
			out = append(out, "session "+short(s.id)+": "+c)
		}
	}
	return out
}

// all is every session open or being stopped.
func (h *Handler) all() []*session {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*session, 0, len(h.sessions)+len(h.ending))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	for s := range h.ending {
		out = append(out, s)
	}
	return out
}
