package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// ids gives every request a client sends an id of ours before mcp-go or a lane sees it, and
// puts the client's id back, byte for byte, into the response. mcp-go reads an id into a Go
// value: a number beyond 2^53 came back rounded (9007199254740993 answered as
// 9007199254740992, 1e22-sized ids in exponent form) and a string with a lone surrogate with
// U+FFFD in its place ("x\udbff" and "x\udbfe" answered alike), so the client could not match
// the response to its request. And it cancels a running request by the id's printed value, so
// a notifications/cancelled naming "2" cancelled request 2 as well: with every id its own
// surrogate, a cancellation reaches mcp-go naming one request or none (see cancelled).
type ids struct {
	prefix   []byte // `"effectfence-id-<random>-`
	mu       sync.Mutex
	next     uint64
	held     map[string]heldID          // surrogate (quoted) -> the client's id
	back     map[string][]string        // jsonrpc.IDKey of a client's id -> the surrogates in flight under it, for cancellations
	bytes    int                        // the client ids' bytes in held
	subs     map[string]json.RawMessage // the latest subscriptions/listen requests' ids by surrogate
	subOrder []string                   // subs' surrogates, oldest first
	subBytes int                        // the ids' bytes in subs
	listened atomic.Bool                // subs is not empty
	n        atomic.Int64               // len(held), read without the lock on every response
}

// heldID is a client's id held under a surrogate: its bytes as sent, and its jsonrpc.IDKey.
type heldID struct {
	raw json.RawMessage
	key string
}

// maxSubs and maxSubBytes bound the subscriptions' ids kept (a client listens on one or a
// few), and maxSubID is the longest kept; a subscriptions/listen with a longer id gets no
// surrogate. An id is kept past its request's response: mcp-go tags the stream's messages
// with it, and sends the acknowledgement from a goroutine of its own, which may write it after
// the response. Until 2026-12-06 only the latest 64 were kept, and a burst of listens whose
// acknowledgements mcp-go wrote late showed the client surrogates (TestManyListensNeverShowTheSurrogate,
// under load).
const (
	maxSubs     = 4096
	maxSubBytes = 1 << 20
	maxSubID    = 1 << 10
)

// maxHeld and maxHeldBytes bound the ids awaiting a response (only a request's id is held, see
// answered, but a response may still not come): beyond them ids pass unchanged, as mcp-go
// alone would treat them.
const (
	maxHeld      = 4096
	maxHeldBytes = 1 << 20
)

// surrogateStart begins every surrogate (its random part follows: ids.prefix).
const surrogateStart = `"effectfence-id-`

func newIDs() *ids {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return &ids{prefix: []byte(surrogateStart + hex.EncodeToString(r[:]) + `-`), held: map[string]heldID{}, back: map[string][]string{}}
}

// wrap returns line with its id replaced by a surrogate when mcp-go will answer it under that
// id, and a notifications/cancelled naming a held id with the surrogate in its place (mcp-go
// cancels a request by the id it saw).
func (x *ids) wrap(line []byte) []byte {
	if !isObject(line) {
		return line // mcp-go's to refuse
	}
	start, end, n, _ := jsonrpc.Member(line, "id")
	if n != 1 {
		return x.cancelled(line)
	}
	id := line[start:end]
	if string(id) == "null" {
		return x.cancelled(line) // mcp-go takes it for a notification: it may cancel
	}
	if idlessOf(id) != hasID || len(id) > maxHeldBytes {
		return line // true, an object: mcp-go's or the router's to refuse
	}
	method, ok := answered(line)
	if !ok {
		return line
	}
	listen := jsonrpc.KeyIs(method, "subscriptions/listen")
	if listen && len(id) > maxSubID {
		// Its surrogate could not be put back in the stream's subscriptionId (subs keeps
		// no id this long): mcp-go's own spelling of the id is better than ours.
		return line
	}
	key := jsonrpc.IDKey(id)
	x.mu.Lock()
	if len(x.held) >= maxHeld || x.bytes+len(id) > maxHeldBytes {
		x.mu.Unlock()
		return line
	}
	x.next++
	sur := string(x.prefix) + strconv.FormatUint(x.next, 10) + `"`
	x.held[sur] = heldID{raw: append(json.RawMessage(nil), id...), key: key}
	x.bytes += len(id)
	x.back[key] = append(x.back[key], sur)
	if listen {
		for len(x.subOrder) > 0 && (len(x.subOrder) >= maxSubs || x.subBytes+len(id) > maxSubBytes) {
			old := x.subOrder[0]
			x.subBytes -= len(x.subs[old])
			delete(x.subs, old)
			x.subOrder = x.subOrder[1:]
		}
		if x.subs == nil {
			x.subs = map[string]json.RawMessage{}
		}
		x.subs[sur] = x.held[sur].raw
		x.subOrder = append(x.subOrder, sur)
		x.subBytes += len(id)
		x.listened.Store(true)
	}
	x.n.Store(int64(len(x.held)))
	x.mu.Unlock()
	return splice(line, start, end, sur)
}

// unwrap puts the client's id back into a response whose id is a surrogate, and into the
// subscriptionId mcp-go tags a subscriptions/listen stream with (the request's id, see
// subscription). Only the message's own id is read otherwise: a surrogate elsewhere (a tool's
// result may hold any text) is left as it is. Before, the first surrogate anywhere in the
// message was replaced, so a message carrying one twice let the prefix reach the client, and
// a response could be sent under another request's id.
func (x *ids) unwrap(msg []byte) []byte {
	if (x.n.Load() == 0 && !x.listened.Load()) || !bytes.Contains(msg, x.prefix) {
		return msg
	}
	msg = x.subscription(msg)
	i, end, n, _ := jsonrpc.Member(msg, "id")
	if n != 1 || !bytes.HasPrefix(msg[i:end], x.prefix) {
		return msg
	}
	sur := string(msg[i:end])
	x.mu.Lock()
	h, ok := x.held[sur]
	if ok {
		delete(x.held, sur)
		x.bytes -= len(h.raw)
		surs := x.back[h.key]
		for j, s := range surs {
			if s == sur {
				surs = append(surs[:j:j], surs[j+1:]...)
				break
			}
		}
		if len(surs) == 0 {
			delete(x.back, h.key)
		} else {
			x.back[h.key] = surs
		}
	}
	x.n.Store(int64(len(x.held)))
	x.mu.Unlock()
	if !ok {
		return msg
	}
	return splice(msg, i, end, h.raw)
}

// subscriptionKey is the _meta member mcp-go tags every message of a subscriptions/listen
// stream with (its acknowledgement, and the result that ends it): the request's id, which the
// client knows it by.
const subscriptionKey = "io.modelcontextprotocol/subscriptionId"

// subscription returns msg with the surrogate of a subscriptions/listen request in
// params._meta or result._meta's subscriptionId replaced by the client's id, or msg as it is.
func (x *ids) subscription(msg []byte) []byte {
	if !bytes.Contains(msg, []byte(subscriptionKey)) || !isObject(msg) {
		return msg
	}
	for _, outer := range [...]string{"params", "result"} {
		os, oe, n, _ := jsonrpc.Member(msg, outer)
		if n != 1 || msg[os] != '{' {
			continue
		}
		ms, me, n, _ := jsonrpc.Member(msg[os:oe], "_meta")
		if n != 1 || msg[os+ms] != '{' {
			continue
		}
		ms, me = os+ms, os+me
		vs, ve, n, _ := jsonrpc.Member(msg[ms:me], subscriptionKey)
		if n != 1 {
			continue
		}
		vs, ve = ms+vs, ms+ve
		x.mu.Lock()
		raw := x.subs[string(msg[vs:ve])]
		x.mu.Unlock()
		if raw == nil {
			continue
		}
		return splice(msg, vs, ve, raw)
	}
	return msg
}

// cancelled returns a notifications/cancelled whose requestId names a held id, in any
// spelling of it, with that id's surrogate in its place; any other line as it is (mcp-go then
// finds no request of that id, every one in flight being known by its surrogate). line is a
// valid JSON object.
func (x *ids) cancelled(line []byte) []byte {
	if x.n.Load() == 0 {
		return line
	}
	rs, re, ok := cancelTarget(line)
	if !ok {
		return line
	}
	key := jsonrpc.IDKey(line[rs:re])
	x.mu.Lock()
	surs := x.back[key]
	var sur string
	if len(surs) == 1 { // several in flight under the id: it names neither for sure
		sur = surs[0]
	}
	x.mu.Unlock()
	if sur == "" && strings.HasPrefix(key, "s"+string(x.prefix[1:])) {
		// It names one of our surrogates, which no client was given (a client id spelled so
		// gets a surrogate of its own): mcp-go would cancel the request it stands for. It
		// names no request of this client's.
		sur = "null"
	}
	if sur == "" {
		return line
	}
	return splice(line, rs, re, sur)
}

// cancelTarget finds the requestId of line, a valid JSON object, when it is a
// notifications/cancelled: the span line[start:end] of its value.
func cancelTarget(line []byte) (start, end int, ok bool) {
	if !bytes.Contains(line, []byte("notifications/cancelled")) {
		return 0, 0, false
	}
	// The method may be any JSON value here: only a string literal may be unquoted.
	if ms, me, n, _ := jsonrpc.Member(line, "method"); n != 1 || line[ms] != '"' || !jsonrpc.KeyIs(line[ms:me], "notifications/cancelled") {
		return 0, 0, false
	}
	ps, pe, n, _ := jsonrpc.Member(line, "params")
	if n != 1 || line[ps] != '{' {
		return 0, 0, false
	}
	rs, re, n, _ := jsonrpc.Member(line[ps:pe], "requestId")
	if n != 1 {
		return 0, 0, false
	}
	return ps + rs, ps + re, true
}

// splice returns a copy of b with b[start:end] replaced by with.
func splice[T ~string | ~[]byte](b []byte, start, end int, with T) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(with))
	return append(append(append(out, b[:start]...), with...), b[end:]...)
}

// answered reports whether mcp-go answers line, an object with one member named "id", under
// that id. mcp-go reads jsonrpc, method, id and result with encoding/json, which takes a
// member for a field whatever its case ("ID", "Result", even "reſult": bytes.EqualFold) and
// keeps the last of several, and answers with id null a message it cannot read that way
// ("jsonrpc": 2, a method that is not a string) and not at all one with a result (a
// response). A surrogate for the id of a message that gets no answer under it would be held
// until the bound on held ids, which such messages would use up (ids beyond it pass
// unchanged). So: exactly one member read as the id (the one named "id"), every one read as
// jsonrpc or method a string, at least one method, and none read as result.
// It returns the method mcp-go reads (the literal of the last member read as the method).
func answered(line []byte) (method []byte, ok bool) {
	idNames := 0
	for m := range jsonrpc.Members(line) {
		switch readAs(line[m.Key:m.KeyEnd]) {
		case "id":
			idNames++
		case "method":
			if line[m.Start] != '"' {
				return nil, false
			}
			method = line[m.Start:m.End]
		case "jsonrpc":
			if line[m.Start] != '"' {
				return nil, false
			}
		case "result":
			return nil, false
		}
	}
	return method, idNames == 1 && method != nil
}

// readAs is the member of mcp-go's envelope (id, method, jsonrpc, result) that encoding/json
// reads the member named by the literal key into, or "".
func readAs(key []byte) string {
	name := key[1 : len(key)-1]
	plain := bytes.IndexByte(name, '\\') < 0
	for _, c := range name {
		if c >= 0x80 {
			plain = false
			break
		}
	}
	if plain && len(name) != 2 && len(name) != 6 && len(name) != 7 {
		return "" // the common case, without decoding
	}
	s := string(name)
	if !plain {
		s = jsonrpc.Unquote(key)
	}
	for _, f := range [...]string{"id", "method", "jsonrpc", "result"} {
		if strings.EqualFold(s, f) {
			return f
		}
	}
	return ""
}

// isObject reports whether line is one valid JSON object (what jsonrpc.Member walks).
func isObject(line []byte) bool {
	i := jsonrpc.SkipSpace(line, 0)
	return i < len(line) && line[i] == '{' && json.Valid(line)
}
