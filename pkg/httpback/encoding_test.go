package httpback

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// gzipAbove answers like a server behind a proxy that compresses what is large enough (nginx's
// gzip with gzip_min_length 1000, Caddy's encode with its minimum_length): an answer of at
// least 1,000 bytes is sent gzipped when the request accepts gzip; a small one, the initialize
// result among them, as it is.
func gzipAbove(w http.ResponseWriter, r *http.Request, msg []byte) {
	w.Header().Set("Content-Type", "application/json")
	if len(msg) < 1000 || !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Write(msg)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	zw := gzip.NewWriter(w)
	zw.Write(msg)
	zw.Close()
}

// TestAcceptEncodingOfTheConfigIsTheTransportsOwn: an Accept-Encoding among the configured
// headers (--upstream-header 'Accept-Encoding: gzip, deflate, br', copied from a browser or
// from curl --compressed) is not sent: Go's transport asks for gzip itself and decodes the
// answer, which it does not when the request already names an encoding. Before 2026-12-07 it
// was sent as given: the handshake, answered small and plain, passed, and a call whose result
// a compressing proxy gzipped ran once and was left may-have-run (unknown, fenced), its result
// unreadable ("not a JSON-RPC message").
func TestAcceptEncodingOfTheConfigIsTheTransportsOwn(t *testing.T) {
	t.Parallel()
	result := json.RawMessage(`{"content":[{"type":"text","text":"` + strings.Repeat("paid ", 1000) + `"}]}`)
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		gzipAbove(w, r, jsonrpc.Response(m.ID, result))
	}
	for _, given := range []string{"gzip, deflate, br", "gzip", "br"} {
		before := f.count("tools/call")
		s := session(t, upstream(t, srv.URL, Config{Header: http.Header{"Accept-Encoding": {given}}}))
		got, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"charge"}`))
		if err != nil {
			t.Fatalf("Accept-Encoding %q configured: the call ran and its answer was lost: %v", given, err)
		}
		if !bytes.Equal(got, result) {
			t.Fatalf("Accept-Encoding %q configured: result %.80q..., want the server's bytes", given, got)
		}
		if n := f.count("tools/call") - before; n != 1 {
			t.Fatalf("Accept-Encoding %q configured: the server got %d POSTs of the call, want 1", given, n)
		}
	}
}
