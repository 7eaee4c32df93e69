package httpfront_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// member is the raw value of a top-level member of a JSON-RPC line, "" when absent.
func member(t *testing.T, line, name string) string {
	t.Helper()
	if _, err := jsonrpc.Parse([]byte(line)); err != nil {
		t.Fatalf("not a JSON-RPC message (%v): %q", err, line)
	}
	s, e, _, _ := jsonrpc.Member([]byte(line), name)
	if s < 0 {
		return ""
	}
	return line[s:e]
}

// hostileIDs are JSON-RPC ids a float64 or a re-encoder would change: beyond ±2^53, a
// fraction, an exponent, -0, 1.0, beyond double range, strings with escapes.
var hostileIDs = []string{
	`12345678901234567890123`, `-9007199254740993`, `1.5`, `1e2`, `1E2`, `-0`, `1.0`, `1e400`,
	`"a\u0000<b>&` + "\u2028" + `\ud800"`, `"\u0041\/"`,
}

// `wrap --listen` in front of the real server-everything, as its stdio child and as a
// Streamable HTTP upstream: every request id comes back as the client wrote it (executed and
// replayed calls, errors wrap makes, errors and results the server makes), and what the server
// answers reaches the client byte for byte: a JSON-RPC error holding a line separator and a
// lone surrogate, and an isError result.
func TestGatewayKeepsIDsAndServerBytes(t *testing.T) {
	t.Parallel()
	everything, _ := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-everything")
	if _, err := os.Stat(everything); err != nil {
		t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
	}
	up := startEverythingHTTP(t, everything)
	direct := &gw{t: t, url: up.url, log: &logBuf{}}
	dsid := direct.open(nil)
	// What the server itself answers, for comparison.
	const (
		prompt = `{"jsonrpc":"2.0","id":%s,"method":"prompts/get","params":{"name":"n\u2028\ud800<&>` + "\u2028" + `"}}`
		badSum = `{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":1}}}`
		echo   = `{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi <&> ` + "\u2028" + `"}}}`
	)
	wantErr := member(t, direct.mustPost(dsid, nil, fmt.Sprintf(prompt, "1")).raw[0], "error")
	wantIsError := member(t, direct.mustPost(dsid, nil, fmt.Sprintf(badSum, "2")).raw[0], "result")
	if wantErr == "" || wantIsError == "" {
		t.Fatalf("server-everything answered no error (%q) or no result (%q)", wantErr, wantIsError)
	}

	for _, back := range []string{"stdio", "http"} {
		t.Run(back, func(t *testing.T) {
			argv := []string{binary(t), "wrap", "--ledger", filepath.Join(t.TempDir(), "l.db"), "--listen", "127.0.0.1:0", "--fence", "echo", "--fence", "get-sum"}
			if back == "http" {
				argv = append(argv, "--upstream", up.url)
			} else {
				argv = append(argv, "--", everything, "stdio")
			}
			u, stop := startProcT(t, nil, "effectfence wrap: listening on ", argv...)
			defer stop()
			g := &gw{t: t, url: u, log: &logBuf{}}
			sid := g.open(nil)
			var first string
			for i, id := range hostileIDs {
				for _, c := range []struct{ what, body, want string }{
					{"echo", echo, ""},
					{"isError result", badSum, wantIsError},
					{"JSON-RPC error", prompt, wantErr},
					{"refused params", `{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"echo","name":"echo"}}`, ""},
				} {
					r := g.mustPost(sid, nil, fmt.Sprintf(c.body, id))
					if len(r.raw) == 0 {
						t.Fatalf("%s with id %s: no answer (status %d)", c.what, id, r.status)
					}
					line := r.raw[len(r.raw)-1]
					if got := member(t, line, "id"); got != id {
						t.Errorf("%s: sent id %s, got back %s", c.what, id, got)
					}
					switch {
					case c.what == "echo" && i == 0:
						first = member(t, line, "result")
					case c.what == "echo":
						if res := member(t, line, "result"); !strings.Contains(res, `"effectfence/replayed":true`) || !strings.Contains(res, `"text":"Echo: hi <&> `+"\u2028"+`"`) {
							t.Errorf("echo with id %s is not a replay of %s:\n%s", id, first, res)
						}
					case c.what == "JSON-RPC error":
						if got := member(t, line, "error"); got != c.want {
							t.Errorf("the server's JSON-RPC error changed on its way (id %s):\n got %s\nwant %s", id, got, c.want)
						}
					case c.want != "":
						if got := member(t, line, "result"); got != c.want {
							t.Errorf("%s changed on its way (id %s):\n got %s\nwant %s", c.what, id, got, c.want)
						}
					}
				}
			}
		})
	}
}
