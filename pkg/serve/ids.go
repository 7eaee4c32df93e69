package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// ids keeps request ids that mcp-go would not give back as sent. mcp-go reads an id into a Go
// value, so a number beyond 2^53 came back rounded (9007199254740993 answered as
// 9007199254740992, 1e22-sized ids in exponent form), a string with a lone surrogate came
// back with U+FFFD in its place ("x\udbff" and "x\udbfe" answered alike), and the client
// could not match the response to its request. Such an id is replaced by a string of ours before mcp-go or a lane
// sees the message, and the exact bytes the client sent are put back in the response.
type ids struct {
	prefix []byte // `"effectfence-id-<random>-`
	mu     sync.Mutex
	next   uint64
	held   map[string]json.RawMessage // surrogate (quoted) -> the client's id
	back   map[string]string          // the client's id -> its surrogate, for cancellations
	n      atomic.Int64               // len(held), read without the lock on every response
}

// maxHeld bounds the ids awaiting a response (only a request's id is held, see answered,
// but a response may still not come): beyond it ids pass unchanged, as before.
const maxHeld = 4096

// surrogateStart begins every surrogate (its random part follows: ids.prefix).
const surrogateStart = `"effectfence-id-`

func newIDs() *ids {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return &ids{prefix: []byte(surrogateStart + hex.EncodeToString(r[:]) + `-`), held: map[string]json.RawMessage{}, back: map[string]string{}}
}

// wrap returns line with an id that would not survive mcp-go replaced by a surrogate, and a
// notifications/cancelled naming such an id with the surrogate in its place (mcp-go cancels a
// request by the id it saw).
func (x *ids) wrap(line []byte) []byte {
	if !isObject(line) {
		return line // mcp-go's to refuse
	}
	start, end, n, _ := jsonrpc.Member(line, "id")
	if n != 1 {
		return x.cancelled(line)
	}
	if survives(line[start:end]) || !answered(line) {
		return line
	}
	x.mu.Lock()
	if len(x.held) >= maxHeld {
		x.mu.Unlock()
		return line
	}
	x.next++
	sur := string(x.prefix) + strconv.FormatUint(x.next, 10) + `"`
	x.held[sur] = append(json.RawMessage(nil), line[start:end]...)
	x.back[string(line[start:end])] = sur
	x.n.Store(int64(len(x.held)))
	x.mu.Unlock()
	out := make([]byte, 0, len(line)+len(sur))
	out = append(append(append(out, line[:start]...), sur...), line[end:]...)
	return out
}

// unwrap puts the client's id back into a response whose id is a surrogate. Only the message's
// own id is read: a surrogate elsewhere (mcp-go echoes a subscriptions/listen request's id as
// its subscriptionId; a tool's result may hold any text) is left as it is. Before, the first
// surrogate anywhere in the message was replaced, so a message carrying one twice let the
// prefix reach the client, and a response could be sent under another request's id.
func (x *ids) unwrap(msg []byte) []byte {
	if x.n.Load() == 0 || !bytes.Contains(msg, x.prefix) {
		return msg
	}
	i, end, n, _ := jsonrpc.Member(msg, "id")
	if n != 1 || !bytes.HasPrefix(msg[i:end], x.prefix) {
		return msg
	}
	sur := string(msg[i:end])
	x.mu.Lock()
	orig, ok := x.held[sur]
	delete(x.held, sur)
	if x.back[string(orig)] == sur {
		delete(x.back, string(orig))
	}
	x.n.Store(int64(len(x.held)))
	x.mu.Unlock()
	if !ok {
		return msg
	}
	out := make([]byte, 0, len(msg)+len(orig))
	return append(append(append(out, msg[:i]...), orig...), msg[i+len(sur):]...)
}

// cancelled returns a notifications/cancelled whose requestId is a client's id held under a
// surrogate with the surrogate in its place; any other line as it is. line is a valid JSON
// object.
func (x *ids) cancelled(line []byte) []byte {
	if x.n.Load() == 0 || !bytes.Contains(line, []byte("notifications/cancelled")) {
		return line
	}
	// The method may be any JSON value here: only a string literal may be unquoted.
	if ms, me, n, _ := jsonrpc.Member(line, "method"); n != 1 || line[ms] != '"' || !jsonrpc.KeyIs(line[ms:me], "notifications/cancelled") {
		return line
	}
	ps, pe, n, _ := jsonrpc.Member(line, "params")
	if n != 1 || line[ps] != '{' {
		return line
	}
	rs, re, n, _ := jsonrpc.Member(line[ps:pe], "requestId")
	if n != 1 {
		return line
	}
	rs, re = ps+rs, ps+re
	x.mu.Lock()
	sur, ok := x.back[string(line[rs:re])]
	x.mu.Unlock()
	if !ok {
		return line
	}
	out := make([]byte, 0, len(line)+len(sur))
	return append(append(append(out, line[:rs]...), sur...), line[re:]...)
}

// answered reports whether mcp-go answers line, an object with one id, under its id: a
// request, with one method that is a string and no result. A client's response gets no
// answer, nor does a result beside a method; a method that is not a string is answered with
// id null. A surrogate for their id would be held until the bound on held ids, which they
// would use up (ids beyond it pass unchanged).
func answered(line []byte) bool {
	ms, _, n, _ := jsonrpc.Member(line, "method")
	if n != 1 || line[ms] != '"' {
		return false
	}
	_, _, n, _ = jsonrpc.Member(line, "result")
	return n == 0
}

// isObject reports whether line is one valid JSON object (what jsonrpc.Member walks).
func isObject(line []byte) bool {
	i := jsonrpc.SkipSpace(line, 0)
	return i < len(line) && line[i] == '{' && json.Valid(line)
}

// survives reports whether mcp-go gives an id back as it came: a string of printable ASCII
// that needs no escape (mcp-go decodes a string and encodes it again: a lone surrogate came
// back as U+FFFD, so two ids became one, and <, >, &, U+2028 and any escape were respelled),
// or an integer a float64 holds exactly, written plainly. Other values (null, objects) are
// mcp-go's to refuse.
func survives(id []byte) bool {
	if bytes.HasPrefix(id, []byte(surrogateStart)) {
		// Spelled as a surrogate is (a client that saw one, or guesses): it gets one of its
		// own, so no client id is ever taken for another request's surrogate.
		return false
	}
	if len(id) > 0 && id[0] == '"' {
		for _, c := range id[1 : len(id)-1] {
			if c < 0x20 || c > 0x7e || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
		}
		return true
	}
	if len(id) == 0 || (id[0] != '-' && (id[0] < '0' || id[0] > '9')) {
		return true
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil && n >= -(1<<53) && n <= 1<<53 && strconv.FormatInt(n, 10) == string(id)
}
