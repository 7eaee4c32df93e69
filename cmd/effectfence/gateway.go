package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	goio "io"
	stdlog "log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/effectfence/effectfence/internal/httptoken"
	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/internal/userfile"
	"github.com/effectfence/effectfence/pkg/gatewaymetrics"
	"github.com/effectfence/effectfence/pkg/httpback"
	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// envAPIKeys names a file of listener keys, as --api-keys does.
const envAPIKeys = "EFFECTFENCE_API_KEYS"

func gatewayFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "upstream", Usage: "fence the remote MCP server at this Streamable HTTP URL instead of running a command (no -- <command>)"},
		&cli.StringSliceFlag{Name: "upstream-header", Usage: "with --upstream: a header `NAME: VALUE` sent with every request (repeatable; values never logged; prefer env " + envUpstreamHeaders + " for secrets)"},
		&cli.StringFlag{Name: "listen", Usage: "serve Streamable HTTP on ADDR (endpoint /mcp, plus /healthz) instead of stdio; a bare :PORT binds 127.0.0.1"},
		&cli.StringSliceFlag{Name: "allow-origin", Usage: "with --listen: an Origin browsers may call from (repeatable; loopback origins are allowed on a loopback listener; * allows any)"},
		&cli.StringFlag{Name: "api-keys", Usage: "with --listen: a `FILE` of lines PRINCIPAL TOKEN; clients must send Authorization: Bearer TOKEN (env " + envAPIKeys + ")"},
		&cli.BoolFlag{Name: "pass-auth", Usage: "with --listen: pass each client's Authorization to the MCP server (--upstream) and use a hash of it as the principal"},
		&cli.BoolFlag{Name: "allow-unauthenticated", Usage: "with --listen on a non-loopback address: serve without --api-keys or --pass-auth"},
		&cli.BoolFlag{Name: "share-principals", Usage: "with --listen: identical calls of different principals are one action (a fleet acting for one account); default: each principal is its own scope"},
		&cli.IntFlag{Name: "max-sessions", Value: httpfront.DefaultMaxSessions, Usage: "with --listen: open MCP sessions at most (each runs its own MCP server child, or upstream session)"},
		&cli.IntFlag{Name: "max-sessions-per-principal", HideDefault: true, Usage: "with --listen: sessions one principal (an API key, or a client's credentials with --pass-auth) may hold at most; past it its initialize gets 429 (default: only --max-sessions bounds them)"},
		&cli.DurationFlag{Name: "session-idle", Value: httpfront.DefaultIdle, Usage: "with --listen: close a session idle this long"},
		&cli.IntFlag{Name: "max-conns", HideDefault: true, Usage: "with --listen: client connections open at most (default: half the open-file limit, leaving the rest to the ledger, the spool and the servers); past it the connection idle longest is closed, or a new one waits"},
		&cli.DurationFlag{Name: "body-timeout", Value: httpfront.DefaultBodyTimeout, Usage: "with --listen: a request's body must arrive within this long, else its connection is cut and nothing runs (streamed answers are not bounded by it)"},
		&cli.StringSliceFlag{Name: "metrics-tool", Usage: "with --listen: give this tool its own series in /metrics (repeatable; other tools are counted together)"},
	}
}

// listenAddr applies the default host: a bare :PORT or PORT is 127.0.0.1.
func listenAddr(s string) (addr string, loopback bool, err error) {
	if !strings.Contains(s, ":") {
		s = ":" + s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", false, fmt.Errorf("--listen %q: want HOST:PORT or :PORT", s)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	loopback = strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
	return net.JoinHostPort(host, port), loopback, nil
}

// readAPIKeys reads a keys file: one `PRINCIPAL TOKEN` per line, # comments. Token values
// never appear in errors.
func readAPIKeys(path string) (map[string]string, error) {
	f, err := userfile.Open(path) // a named pipe nothing writes to reads as empty, not for ever
	if err != nil {
		return nil, fmt.Errorf("--api-keys: %v", err)
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("--api-keys %s:%d: want `PRINCIPAL TOKEN`", path, n)
		}
		if len(fields[1]) < 16 {
			return nil, fmt.Errorf("--api-keys %s:%d: the token of %q is shorter than 16 characters", path, n, fields[0])
		}
		if _, dup := keys[fields[1]]; dup {
			return nil, fmt.Errorf("--api-keys %s:%d: a token is listed twice", path, n)
		}
		keys[fields[1]] = fields[0]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--api-keys %s: %v", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--api-keys %s: no keys", path)
	}
	return keys, nil
}

// parseInlineKeys reads keys given in the environment: PRINCIPAL:TOKEN pairs separated by
// commas or white space. Token values never appear in errors.
func parseInlineKeys(s string) (map[string]string, error) {
	keys := map[string]string{}
	for i, pair := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		name, token, ok := strings.Cut(pair, ":")
		switch {
		case !ok || name == "" || token == "":
			return nil, fmt.Errorf("%s: entry %d: want PRINCIPAL:TOKEN", envAPIKeys, i+1)
		case len(token) < 16:
			return nil, fmt.Errorf("%s: the token of %q is shorter than 16 characters", envAPIKeys, name)
		}
		if _, dup := keys[token]; dup {
			return nil, fmt.Errorf("%s: a token is listed twice", envAPIKeys)
		}
		keys[token] = name
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no keys", envAPIKeys)
	}
	return keys, nil
}

// isFile says path names an existing regular file.
func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// gateway is what `wrap --listen` runs: the HTTP front over one proxy per session.
type gateway struct {
	front *httpfront.Handler
	srv   *http.Server
	ln    net.Listener
	// abandon, run once the grace of a stop is over, ends the waits of duplicates waiting for
	// another process's attempt (their sessions share the attempts in flight, so no single
	// session's stop may end them).
	abandon func()
}

// connIdle closes a client's keep-alive connection idle this long between requests: longer
// than the idle timeouts of common load balancers and proxies (60 s), which should close an
// idle connection before its server does.
const connIdle = 2 * time.Minute

// headerTimeout bounds how long a request's headers may take to arrive.
const headerTimeout = 10 * time.Second

// healthTimeout bounds /healthz's query of the ledger.
const healthTimeout = 2 * time.Second

// maxConnsWithoutLimit is --max-conns when not given and the process has no open-file limit.
const maxConnsWithoutLimit = 10000

// listenConfig is what the listener flags say, checked before anything is opened.
type listenConfig struct {
	addr  string
	front httpfront.Config
	// connIdle is the HTTP server's IdleTimeout (default connIdle; tests lower it).
	connIdle time.Duration
	// health, when set, is /healthz's check of the ledger.
	health func(context.Context) error
	// maxConns bounds the client connections open at once (--max-conns; 0: the default).
	maxConns int
}

// defaultMaxConns is --max-conns when not given: half the process's open-file limit (the
// other half is for the ledger, the spool, each session's server and its connections), and
// 10,000 where there is no such limit.
func defaultMaxConns() int {
	if n := openFileLimit(); n > 0 {
		return max(n/2, 1)
	}
	return maxConnsWithoutLimit
}

// gatewayOnly are the flags that mean something only with --listen.
var gatewayOnly = []string{"allow-origin", "api-keys", "pass-auth", "allow-unauthenticated", "share-principals", "max-sessions", "max-sessions-per-principal", "max-conns", "session-idle", "body-timeout", "metrics-tool"}

// checkListen checks the listener flags: nil without --listen (and none of its flags).
func checkListen(cmd *cli.Command) (*listenConfig, error) {
	if cmd.String("listen") == "" {
		for _, f := range gatewayOnly {
			if cmd.IsSet(f) {
				return nil, usageErr("--%s needs --listen", f)
			}
		}
		return nil, nil
	}
	addr, loopback, err := listenAddr(cmd.String("listen"))
	if err != nil {
		return nil, usageErr("%v", err)
	}
	cfg := httpfront.Config{
		AllowOrigins: cmd.StringSlice("allow-origin"), PassAuth: cmd.Bool("pass-auth"),
		Loopback: loopback, MaxSessions: cmd.Int("max-sessions"), MaxSessionsPerPrincipal: cmd.Int("max-sessions-per-principal"), Idle: cmd.Duration("session-idle"),
		BodyTimeout: cmd.Duration("body-timeout"),
	}
	env := os.Getenv(envAPIKeys)
	switch keysFile := cmd.String("api-keys"); {
	case keysFile != "":
		if cfg.Keys, err = readAPIKeys(keysFile); err != nil {
			return nil, usageErr("%v", err)
		}
	case strings.Contains(env, ":") && !isFile(env): // a file's path may hold ':' (C:\keys)
		if cfg.Keys, err = parseInlineKeys(env); err != nil {
			return nil, usageErr("%v", err)
		}
	case env != "":
		if cfg.Keys, err = readAPIKeys(env); err != nil {
			return nil, usageErr("%s: %v", envAPIKeys, err)
		}
	}
	// The keys tell the principals apart: the servers run for the sessions must not read them
	// (they could call the gateway as any principal). Gone from this process's environment,
	// so no child gets them; not part of any scope (EFFECTFENCE_* is left out of it).
	if env != "" {
		if err := os.Unsetenv(envAPIKeys); err != nil {
			return nil, fmt.Errorf("%s: %v", envAPIKeys, err)
		}
	}
	if !loopback && len(cfg.Keys) == 0 && !cmd.Bool("allow-unauthenticated") {
		switch {
		case !cfg.PassAuth:
			return nil, usageErr("--listen %s is not a loopback address: give --api-keys FILE or --pass-auth (or --allow-unauthenticated behind an authenticating proxy)", addr)
		case cmd.String("upstream") == "":
			// --pass-auth leaves the checking to an upstream that authenticates each client; a
			// server run as a command receives no Authorization, so nothing would check any
			// (before 2026-12-06 such a gateway served every host that reached the address).
			return nil, usageErr("--listen %s is not a loopback address: --pass-auth authenticates clients only through an --upstream that checks their Authorization, and a server run as a command checks none: give --api-keys FILE (or --allow-unauthenticated behind an authenticating proxy)", addr)
		}
	}
	maxConns := cmd.Int("max-conns")
	if !cmd.IsSet("max-conns") {
		maxConns = defaultMaxConns()
	}
	if cfg.MaxSessions <= 0 || cfg.Idle <= 0 || cfg.BodyTimeout <= 0 || maxConns <= 0 {
		return nil, usageErr("--max-sessions, --max-conns, --session-idle and --body-timeout must be positive")
	}
	if cfg.MaxSessionsPerPrincipal < 0 || cmd.IsSet("max-sessions-per-principal") && cfg.MaxSessionsPerPrincipal == 0 {
		return nil, usageErr("--max-sessions-per-principal must be positive")
	}
	return &listenConfig{addr: addr, front: cfg, connIdle: connIdle, maxConns: maxConns}, nil
}

// newGateway makes the front and opens the listener. newSession makes the proxy of one
// session; metrics are fed the sessions and HTTP requests and served at /metrics.
func newGateway(lc *listenConfig, log goio.Writer, newSession func(who httpfront.Caller) (*wrap.Proxy, error), metrics *gatewaymetrics.Metrics) (*gateway, error) {
	cfg := lc.front
	cfg.NewSession, cfg.Log = newSession, log
	addr := lc.addr
	cfg.OnSession = func(delta int) {
		if delta > 0 {
			metrics.SessionOpened()
		} else {
			metrics.SessionClosed()
		}
	}
	cfg.Observe = metrics.Observe // the tools/calls the front refuses itself
	front, err := httpfront.New(cfg)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(httpfront.DefaultPath, front)
	// /healthz and /metrics are not behind the keys, but refuse a foreign Origin or, on a
	// loopback listener, a Host that is not a loopback name, as /mcp does: a page rebound to
	// this address must not read them (before 2026-12-04 it could).
	mux.Handle("/healthz", front.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if lc.health != nil {
			ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
			defer cancel()
			if err := lc.health(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "ledger not answering: %s\n", safetext.Escape(err.Error()))
				return
			}
		}
		fmt.Fprintf(w, "ok %d sessions\n", front.Sessions())
	})))
	mux.Handle("/metrics", front.Guard(metrics.Handler()))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		front.Close("the listener could not open")
		return nil, fmt.Errorf("--listen %s: %v", addr, err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && lc.front.Loopback && !tcp.IP.IsLoopback() {
		// "localhost" is taken for a loopback name, which lets the gateway serve without
		// keys; the hosts file decides where it binds, and may say otherwise.
		ln.Close()
		front.Close("the listener is not on a loopback address")
		return nil, fmt.Errorf("--listen %s bound %s, which is not a loopback address (the hosts file maps the name elsewhere): name a loopback address such as 127.0.0.1:PORT, or the address to serve on itself (with --api-keys FILE, or --pass-auth and --upstream)", addr, tcp.IP)
	}
	// No ReadTimeout or WriteTimeout: either would also bound a response streamed for as long
	// as a call runs. The front bounds each request's body itself (--body-timeout) and each
	// write of a stream; IdleTimeout closes keep-alive connections left idle.
	idle := lc.connIdle
	if idle <= 0 {
		idle = connIdle
	}
	maxConns := lc.maxConns
	if maxConns <= 0 {
		maxConns = defaultMaxConns()
	}
	limit := newConnLimit(ln, maxConns)
	srv := &http.Server{
		Handler: limit.headsRead(countHTTP(boundBody(mux, front.BodyTimeout()), metrics)), ReadHeaderTimeout: headerTimeout, IdleTimeout: idle,
		ConnState: limit.connState, ConnContext: limit.connContext,
		// The server's own complaints (a failed accept, a recovered panic) are effectfence's
		// log lines, in the chosen format; before, they went to stderr as Go's log writes them.
		ErrorLog: stdlog.New(log, "effectfence wrap: ", 0),
	}
	return &gateway{front: front, srv: srv, ln: limit}, nil
}

// serve serves until ctx ends, then stops: no new sessions or requests, each session's calls
// in flight get the grace, then what a back still held is recorded as unknown.
func (g *gateway) serve(ctx context.Context, io streams, grace time.Duration) error {
	fmt.Fprintf(io.err, "effectfence wrap: listening on http://%s%s\n", g.ln.Addr(), httpfront.DefaultPath)
	errc := make(chan error, 1)
	go func() { errc <- g.srv.Serve(g.ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	if g.abandon != nil {
		t := time.AfterFunc(grace, g.abandon)
		defer t.Stop()
	}
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		sctx, cancel := context.WithTimeout(context.Background(), grace+2*time.Second)
		defer cancel()
		_ = g.srv.Shutdown(sctx) // stop accepting; answered requests finish
	}()
	g.front.Close("the gateway is stopping")
	<-shut
	_ = g.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// scopeFor is the scope id of one principal's calls (the principal is left out with
// --share-principals).
func scopeFor(s store.Scope, principal string, share bool) string {
	if share {
		return s.ID
	}
	return s.ForPrincipal(principal)
}

// runGateway serves `wrap --listen`: one proxy per MCP session, all on one ledger and one set
// of attempts in flight, until a signal; a second signal exits at once.
func runGateway(ctx context.Context, cmd *cli.Command, lc *listenConfig, up *upstreamConfig, opt wrap.Options, scope store.Scope, led *store.Ledger, io streams) error {
	shared := wrap.NewShared()
	share := cmd.Bool("share-principals")
	metrics := gatewaymetrics.New(cmd.StringSlice("metrics-tool")...)
	metrics.WatchEngine(led.Engine)
	opt.Observe = metrics.Observe
	newSession := func(who httpfront.Caller) (*wrap.Proxy, error) {
		o := opt
		o.Scope = scopeFor(scope, who.Principal, share)
		o.Shared = shared
		if up != nil {
			base := up.header
			if lc.front.PassAuth {
				// The upstream authenticates each client by its own Authorization: one that
				// sends none reaches it with none, never with the gateway's configured token
				// (before 2026-12-04 such a client acted as that token's account).
				base = base.Clone()
				base.Del("Authorization")
			}
			o.Backend = wrap.Upstream(up.url, mergeHeader(base, who.Header))
		}
		return wrap.New(o)
	}
	lc.health = func(ctx context.Context) error { _, err := led.Stats(ctx); return err }
	g, err := newGateway(lc, io.err, newSession, metrics)
	if err != nil {
		return err
	}
	ctx, stop := stopOnSignals(ctx, func(sig os.Signal) {
		fmt.Fprintf(io.err, "effectfence wrap: %v: stopping; calls in flight get up to %s to finish (send the signal again to exit at once)\n", sig, opt.Grace)
	}, func(sig os.Signal) {
		calls := g.front.InFlight()
		fmt.Fprintf(io.err, "effectfence wrap: %v again: exiting now and killing the MCP servers; %s abandoned (a fenced one keeps its claim, which the next process fences as unknown): %s\n", sig, plural(len(calls), "call"), strings.Join(calls, "; "))
		g.front.Kill()
	})
	defer stop()
	g.abandon = shared.Abandon
	err = g.serve(ctx, io, opt.Grace)
	if st, serr := led.Stats(context.Background()); serr == nil {
		fmt.Fprintln(io.err, st.Line())
	}
	return err
}

// boundBody bounds how long the body of any request may take to arrive, as the front does for
// its own (which lifts the bound once a body is read): a request to /healthz or /metrics whose
// body trickles in is cut too, since the server drains an unread body after the handler.
func boundBody(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		next.ServeHTTP(w, r)
	})
}

// countHTTP counts every HTTP request by method and status class.
func countHTTP(next http.Handler, m *gatewaymetrics.Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		m.HTTP(r.Method, sw.status)
	})
}

// statusWriter remembers the status a handler wrote; it keeps Flush for SSE.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the server's writer, whose read and write deadlines
// bound a request's body and each write of a stream (httpfront).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// envUpstreamHeaders holds headers for the upstream, one `Name: value` per line: for tokens,
// which should not be in a process's arguments.
const envUpstreamHeaders = "EFFECTFENCE_UPSTREAM_HEADERS"

// upstreamConfig is what --upstream and its headers say.
type upstreamConfig struct {
	url    string
	shown  string // the URL as logs show it: scheme and host (httpback.ShownURL)
	header http.Header
}

// childArgs is the command after --, without the --.
func childArgs(cmd *cli.Command) []string {
	argv := cmd.Args().Slice()
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	return argv
}

// serverArgs is how a command names the MCP server: a command after -- or --upstream URL,
// exactly one of them (what is the command's name in errors, usage its usage line).
func serverArgs(cmd *cli.Command, what, usage string) ([]string, *upstreamConfig, error) {
	argv := childArgs(cmd)
	up, err := checkUpstream(cmd, argv)
	if err != nil {
		return nil, nil, err
	}
	if len(argv) == 0 && up == nil {
		return nil, nil, usageErr("%s: no MCP server command given; usage: %s", what, usage)
	}
	return argv, up, nil
}

// checkUpstream checks --upstream and its headers: nil without --upstream.
func checkUpstream(cmd *cli.Command, argv []string) (*upstreamConfig, error) {
	raw := cmd.String("upstream")
	if raw == "" {
		if cmd.IsSet("upstream-header") {
			return nil, usageErr("--upstream-header needs --upstream")
		}
		return nil, nil
	}
	if len(argv) > 0 {
		return nil, usageErr("wrap: give either --upstream URL or -- <command...>, not both")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErr("--upstream: want an http:// or https:// URL of the server's MCP endpoint")
	}
	up := &upstreamConfig{url: raw, shown: httpback.ShownURL(raw), header: http.Header{}}
	lines := cmd.StringSlice("upstream-header")
	if env := os.Getenv(envUpstreamHeaders); env != "" {
		lines = append(strings.Split(env, "\n"), lines...)
	}
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		name, value, ok := strings.Cut(l, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		// Checked here, at start, as the HTTP client would check them at each request: before
		// 2026-12-04 a malformed header was found only when a session first called the
		// upstream, and every call failed. The value is never shown (it is often a token); the
		// name is, escaped, when it is a name at all.
		switch {
		case !ok || name == "":
			return nil, usageErr("upstream header %d: want `NAME: VALUE` (a name, a colon, a value)", i+1)
		case httptoken.BadByte(name) >= 0:
			// Not the name itself: a line that is not a header may be a pasted secret.
			at := httptoken.BadByte(name)
			return nil, usageErr("upstream header %d: the name holds %q at byte %d: a header name is letters, digits and !#$%%&'*+-.^_`|~ only (the line is not shown)", i+1, string(name[at]), at+1)
		case !headerValue(value):
			return nil, usageErr("upstream header %d (%s): the value holds a control character (CR, LF or another; only tab is allowed), which HTTP cannot send (the value is not shown)", i+1, name)
		}
		up.header.Set(name, value)
	}
	return up, nil
}

// headerValue says s may be sent as a header field's value: no control characters but tab
// (RFC 9110, 5.5; what Go's HTTP client refuses at each request).
func headerValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// mergeHeader is base with extra's values set over it.
func mergeHeader(base, extra http.Header) http.Header {
	out := base.Clone()
	if out == nil {
		out = http.Header{}
	}
	for k, vs := range extra {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
