package wrap

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/effectfence/effectfence/pkg/httpback"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// The proxy core reaches the real server through a Backend (docs/proxy-core.md): a child
// process over stdio (mcpstdio) or a remote Streamable HTTP server (httpback). The core never
// knows which; each back only has to keep the error taxonomy below.

// Conn is one live connection to the server, after its initialize handshake.
type Conn interface {
	// Call sends one request and returns the server's exact result bytes. Errors:
	//   errors.Is(err, mcpstdio.ErrNotSent)  the request definitely did not reach the server;
	//   *jsonrpc.Error                       the server answered with an error;
	//   anything else                        it may have run: a fenced call becomes unknown.
	// A Call never retries a request on its own.
	Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	// Notify sends a notification.
	Notify(method string, params json.RawMessage) error
	// InitResult is the server's initialize result, forwarded to the agent as is.
	InitResult() json.RawMessage
}

// Backend gives the live connection to the server of one agent session, reconnecting (a new
// child, a new upstream session) after the previous one was lost.
type Backend interface {
	// Session returns the live connection, connecting first if none is up.
	Session(ctx context.Context) (Conn, error)
	// Current returns the live connection, or nil; it never connects.
	Current() Conn
	// CloseWithin closes the connection within the budget; later Session calls fail.
	CloseWithin(within time.Duration) error
	// Kill ends the connection at once; later Session calls fail.
	Kill() error
}

// BackendConfig is what the core gives a back for one agent session.
type BackendConfig struct {
	// Init is the agent's initialize params, forwarded as given (the server's tools can
	// depend on the client's capabilities).
	Init        json.RawMessage
	InitTimeout time.Duration
	// Log receives diagnostics, and a child's stderr when Stderr is nil.
	Log io.Writer
	// Stderr, when set, receives a child's stderr.
	Stderr io.Writer
	// OnNotification and OnRequest receive what the server sends, with mcpstdio's ordering
	// contract: a response reaches its Call only after the notifications written before it
	// were delivered.
	OnNotification func(method string, params json.RawMessage)
	OnRequest      func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
}

// Dial makes the back of one agent session.
type Dial func(BackendConfig) Backend

// Stdio is the back that runs the MCP server as a child process: command and env as for
// Options.Command and Options.Env.
func Stdio(command, env []string) Dial {
	return func(c BackendConfig) Backend {
		stderr := c.Stderr
		if stderr == nil {
			stderr = c.Log
		}
		return stdioBack{mcpstdio.NewChild(mcpstdio.Config{
			Command: command, Env: env, Stderr: stderr, Log: c.Log, Init: c.Init, InitTimeout: c.InitTimeout,
			OnNotification: c.OnNotification, OnRequest: c.OnRequest,
		})}
	}
}

type stdioBack struct{ c *mcpstdio.Child }

func (b stdioBack) Session(ctx context.Context) (Conn, error) {
	s, err := b.c.Session(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (b stdioBack) Current() Conn {
	if s := b.c.Current(); s != nil {
		return s
	}
	return nil // not a typed nil
}

func (b stdioBack) CloseWithin(within time.Duration) error { return b.c.CloseWithin(within) }
func (b stdioBack) Kill() error                            { return b.c.Kill() }

// listTools sends tools/list (with cursor when not empty) and returns the raw result.
func listTools(ctx context.Context, c Conn, cursor string) (json.RawMessage, error) {
	var params json.RawMessage
	if cursor != "" {
		params, _ = json.Marshal(map[string]string{"cursor": cursor})
	}
	return c.Call(ctx, "tools/list", params)
}

// Upstream is the back that reaches a remote MCP server over Streamable HTTP at url (one
// upstream session per agent session); header is sent with every request (a client's
// Authorization passed through, say).
func Upstream(url string, header http.Header) Dial {
	return func(c BackendConfig) Backend {
		return httpBack{httpback.NewUpstream(httpback.Config{
			URL: url, Header: header, Init: c.Init, InitTimeout: c.InitTimeout, Log: c.Log,
			OnNotification: c.OnNotification, OnRequest: c.OnRequest,
		})}
	}
}

type httpBack struct{ u *httpback.Upstream }

func (b httpBack) Session(ctx context.Context) (Conn, error) {
	s, err := b.u.Session(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (b httpBack) Current() Conn {
	if s := b.u.Current(); s != nil {
		return s
	}
	return nil
}

func (b httpBack) CloseWithin(within time.Duration) error { return b.u.CloseWithin(within) }
func (b httpBack) Kill() error                            { return b.u.Kill() }
