package mcptest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// The HTTP mode: the same tools over Streamable HTTP, the plainest way a server may serve it:
// one session ("mcptest-session-" and the process's id, so a server started again at the same
// address does not know the session of the one before: 404), every answer a JSON body, no GET stream. Notifications the
// stdio server would write (progress) have no stream to go to and are not sent; "ask" (a
// request to the client) is refused. It prints "mcptest: listening on http://ADDR/mcp" on
// stderr once it accepts connections.

var httpSession = "mcptest-session-" + strconv.Itoa(os.Getpid())

func (s *server) serveHTTP(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "mcptest: listening on http://%s/mcp\n", ln.Addr())
	err = http.Serve(ln, http.HandlerFunc(s.handleHTTP))
	fmt.Fprintln(os.Stderr, "mcptest:", err)
	return 1
}

func (s *server) handleHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		w.WriteHeader(http.StatusOK)
		return
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	m, err := jsonrpc.Parse(body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if m.Method != "initialize" && r.Header.Get("Mcp-Session-Id") != httpSession {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if lostTask(m.Method, m.Params) && m.Method != "tools/call" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if !m.IsRequest() {
		if m.Method == "notifications/cancelled" {
			fmt.Fprintf(os.Stderr, "mcptest: cancelled %s\n", m.Params)
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	var res json.RawMessage
	var rerr *jsonrpc.Error
	var p callParams
	if m.Method == "tools/call" && json.Unmarshal(m.Params, &p) == nil && p.Name == "ask" {
		rerr = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "ask needs a stream to the client: not in HTTP mode"}
	} else {
		res, rerr = s.dispatch(m)
	}
	w.Header().Set("Content-Type", "application/json")
	if m.Method == "initialize" {
		w.Header().Set("Mcp-Session-Id", httpSession)
	}
	if rerr != nil {
		_, _ = w.Write(jsonrpc.ErrorResponse(m.ID, rerr))
		return
	}
	_, _ = w.Write(jsonrpc.Response(m.ID, res))
}
