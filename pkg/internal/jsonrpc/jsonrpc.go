// Package jsonrpc is the JSON-RPC 2.0 framing MCP uses over stdio: one message per line.
//
// It keeps the sender's bytes: a Message's ID, Params, Result and error Data are the exact
// substrings of the line they came from, and the builders splice raw values into the output
// without re-encoding them, so a proxy can pass a result through byte for byte.
package jsonrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// Standard JSON-RPC error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Error is a JSON-RPC error object.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Raw is the object exactly as its sender wrote it (set by Parse); ErrorResponse writes
	// it instead of the fields, so an error passed on reaches its recipient byte for byte:
	// decoding Message into a Go string and writing it again would turn a lone surrogate
	// into U+FFFD, escape U+2028, and drop members JSON-RPC does not define.
	Raw json.RawMessage `json:"-"`
}

func (e *Error) Error() string {
	if e.Code == 0 && e.Message == "" && len(e.Raw) > 0 {
		return fmt.Sprintf("JSON-RPC error %s", e.Raw)
	}
	if len(e.Data) > 0 {
		return fmt.Sprintf("JSON-RPC error %d: %s (data: %s)", e.Code, e.Message, e.Data)
	}
	return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message)
}

// Message is one JSON-RPC message. ID is nil when the member is absent (a notification) and
// the literal null when the sender wrote null.
type Message struct {
	ID     json.RawMessage
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  *Error
}

// IsRequest reports whether m is a request (method and id).
func (m *Message) IsRequest() bool { return m.Method != "" && m.ID != nil }

// IsNotification reports whether m is a notification (method, no id).
func (m *Message) IsNotification() bool { return m.Method != "" && m.ID == nil }

// IsResponse reports whether m is a response (no method, an id, a result or an error).
func (m *Message) IsResponse() bool {
	return m.Method == "" && m.ID != nil && (m.Result != nil || m.Error != nil)
}

type wire struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
	// method and hasMethod are Method as readWire reads it, without a pointer to allocate.
	method    string
	hasMethod bool
}

// Parse decodes one line. It refuses anything that is not a single JSON-RPC 2.0 object with a
// valid shape (batches, wrong version, an id that is not a string, number or null).
func Parse(line []byte) (*Message, error) { return parse(line, false) }

// ParseOwned is Parse for a line the caller hands over (as Reader.ReadLine returns it): the
// Message's raw values share its bytes instead of a copy, so the line must not be changed
// afterwards.
func ParseOwned(line []byte) (*Message, error) { return parse(line, true) }

func parse(line []byte, owned bool) (*Message, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, errors.New("empty line")
	}
	if line[0] == '[' {
		return nil, errors.New("JSON-RPC batches are not supported by MCP")
	}
	if bytes.HasPrefix(line, []byte(byteOrderMark)) {
		// Node's JSON.parse, Python's json and encoding/json refuse it (RFC 8259 lets a
		// reader ignore it, and none of these does).
		return nil, errors.New("the message starts with a byte order mark (U+FEFF); send it without one")
	}
	if line[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	w, ok := readWire(line, owned)
	if !ok {
		w = wire{}
		if err := json.Unmarshal(line, &w); err != nil {
			return nil, fmt.Errorf("invalid JSON: %v", err)
		}
		if w.Method != nil {
			w.method, w.hasMethod = *w.Method, true
		}
	}
	if err := checkEnvelope(line); err != nil {
		return nil, err
	}
	if w.JSONRPC != "2.0" {
		return nil, fmt.Errorf(`"jsonrpc" must be "2.0", got %q`, w.JSONRPC)
	}
	m := &Message{ID: w.ID, Params: w.Params, Result: w.Result}
	if len(m.ID) > 0 {
		switch m.ID[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		default:
			return nil, errors.New(`"id" must be a string, a number or null`)
		}
	}
	if w.hasMethod {
		if w.method == "" {
			return nil, errors.New(`"method" must not be empty`)
		}
		m.Method = w.method
		if len(w.Result) > 0 || len(w.Error) > 0 {
			// JSON-RPC's request has no such member and its response no method: readers
			// disagree on what it is (the TypeScript SDK drops it as no message it knows,
			// mcp-go takes it for an answer; neither runs it, and this parser took it for a
			// request), so a call a server would never have run ran through the fence.
			return nil, ErrMethodBesideAnswer
		}
		if string(m.ID) == "null" && strings.HasPrefix(m.Method, "notifications/") {
			// A notification written with "id": null (as JSON-RPC 1.0 wrote them), which
			// MCP's SDKs (mcp-go, go-sdk, Python's) and serve take for the notification it names:
			// taken for a request, a notifications/cancelled cancelled nothing and was passed
			// on as a request of its own, which the server refused under id null.
			m.ID = nil
		}
		if len(m.Params) > 0 && m.Params[0] != '{' && m.Params[0] != '[' && string(m.Params) != "null" {
			return nil, errors.New(`"params" must be an object or an array`)
		}
		return m, nil
	}
	if len(w.Error) > 0 && string(w.Error) != "null" {
		e, err := readError(w.Error)
		if err != nil {
			return nil, err
		}
		m.Error = e
	}
	if m.ID == nil || (m.Result == nil && m.Error == nil) {
		return nil, errors.New("neither a request, a notification nor a response")
	}
	if m.Error != nil && string(m.Result) != "null" && m.Result != nil {
		// JSON-RPC forbids both; readers differ on which one counts, so one may see a
		// success where another sees a failure.
		return nil, errors.New(`a response carries both "result" and "error": readers disagree on which one counts`)
	}
	return m, nil
}

// readError reads an error object. Any object is an error answer: a server that wrote one
// has answered, and ignoring the line would leave its caller waiting for an answer that
// already came. code and message are read when they have JSON-RPC's types (a code spelled
// -32000.0 is read as -32000) and left zero otherwise; Raw keeps the object as written.
func readError(raw json.RawMessage) (*Error, error) {
	var f struct {
		Code    json.RawMessage `json:"code"`
		Message json.RawMessage `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf(`invalid "error" member: %v`, err)
	}
	e := &Error{Data: f.Data, Raw: raw}
	if string(e.Data) == "null" {
		e.Data = nil
	}
	_ = json.Unmarshal(f.Message, &e.Message) // not a string: left empty
	if n, err := strconv.ParseFloat(string(f.Code), 64); err == nil && n == math.Trunc(n) && math.Abs(n) <= math.MaxInt32 {
		e.Code = int(n)
	}
	return e, nil
}

// byteOrderMark is U+FEFF in UTF-8, which some Windows tools write before the first line.
const byteOrderMark = "\ufeff"

// envelope is JSON-RPC's member names, as the specification spells them.
var envelope = [...]string{"jsonrpc", "id", "method", "params", "result", "error"}

// checkEnvelope refuses a message that parsers read differently, so the fence cannot read one
// message while the server runs another: a member whose name is one of JSON-RPC's but for
// case ("Method": encoding/json, and so Go servers, read it as "method"; JavaScript and Python
// servers ignore it), and a member of JSON-RPC's given twice (most parsers keep the last, some
// the first, some refuse). Names are compared after their escapes are decoded, with Unicode
// case folding as encoding/json does ("ſ" folds to "s"). line is a valid JSON object.
func checkEnvelope(line []byte) error {
	var seen [len(envelope)]bool
	for m := range Members(line) {
		key := line[m.Key+1 : m.KeyEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			key = []byte(Unquote(line[m.Key:m.KeyEnd]))
		}
		for n, name := range envelope {
			if !bytes.EqualFold(key, []byte(name)) {
				continue
			}
			if string(key) != name {
				return fmt.Errorf("member %q is JSON-RPC's %q but for case; servers disagree on whether it is that member", key, name)
			}
			if seen[n] {
				return fmt.Errorf("member %q is given twice; servers disagree on which one counts", name)
			}
			seen[n] = true
		}
	}
	return nil
}

// readWire reads line as json.Unmarshal into a wire would, in one pass and with one copy of
// the line, for the messages every session carries: valid JSON whose member names that
// matter are plain ASCII and whose "jsonrpc" and "method" are plain ASCII strings (or null).
// For anything else it says !ok and Parse lets encoding/json read the line (and word its
// error). Like encoding/json it matches member names without regard to case, lets the last
// of duplicate members win, keeps raw values (null included) byte for byte, and ignores
// members it does not know.
func readWire(line []byte, owned bool) (w wire, ok bool) {
	if !json.Valid(line) {
		return w, false
	}
	if !owned {
		line = bytes.Clone(line) // the Message must not share the caller's buffer
	}
	for i := SkipSpace(line, 1); line[i] == '"'; {
		keyEnd := EndOfString(line, i)
		key := line[i+1 : keyEnd-1]
		vs := SkipSpace(line, SkipSpace(line, keyEnd)+1) // past the colon
		ve := EndOfValue(line, vs)
		raw := json.RawMessage(line[vs:ve])
		if !plainASCII(key) {
			return w, false
		}
		switch {
		case bytes.EqualFold(key, []byte("jsonrpc")):
			switch {
			case raw[0] == 'n': // null leaves a string as it was
			case raw[0] == '"' && plainASCII(raw):
				w.JSONRPC = string(raw[1 : len(raw)-1])
			default:
				return w, false
			}
		case bytes.EqualFold(key, []byte("method")):
			switch {
			case raw[0] == 'n':
				w.method, w.hasMethod = "", false
			case raw[0] == '"' && plainASCII(raw):
				w.method, w.hasMethod = method(raw[1:len(raw)-1]), true
			default:
				return w, false
			}
		case bytes.EqualFold(key, []byte("id")):
			w.ID = raw
		case bytes.EqualFold(key, []byte("params")):
			w.Params = raw
		case bytes.EqualFold(key, []byte("result")):
			w.Result = raw
		case bytes.EqualFold(key, []byte("error")):
			w.Error = raw
		}
		if i = SkipSpace(line, ve); line[i] == ',' {
			i = SkipSpace(line, i+1)
		}
	}
	return w, true
}

// method returns the string b spells, without a copy for the methods every session carries.
func method(b []byte) string {
	switch string(b) { // compared without a copy
	case "tools/call":
		return "tools/call"
	case "notifications/progress":
		return "notifications/progress"
	case "notifications/message":
		return "notifications/message"
	case "notifications/cancelled":
		return "notifications/cancelled"
	case "ping":
		return "ping"
	case "tools/list":
		return "tools/list"
	}
	return string(b)
}

// plainASCII says whether b is ASCII without backslashes: a member name or string literal
// whose bytes are the characters it stands for.
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}

// ErrMethodBesideAnswer is Parse's refusal of a message that carries "method" beside "result"
// or "error".
var ErrMethodBesideAnswer = errors.New(`the message carries "method" beside "result" or "error": readers disagree on whether it is a request or an answer`)

// ErrTooLong is returned by Reader.ReadLine for a line longer than its limit; the line has
// been skipped and the next ReadLine continues after it.
var ErrTooLong = errors.New("line too long")

// ErrNoRoom is returned by Reader.ReadLine for a line that grew past the free size of a
// metered Reader (Meter) while its pool had no room for it within the wait: the line has been
// skipped unread, holding nothing, and the next ReadLine continues after it (SkippedID and
// SkippedRequestID say what it was).
var ErrNoRoom = errors.New("no room in the memory budget for the line")

// Reader reads newline-delimited messages.
type Reader struct {
	r       *bufio.Reader
	max     int
	skipped json.RawMessage // see SkippedID
	request json.RawMessage // see SkippedRequestID

	meter *meter // see Meter; nil: lines take no budget
	held  int64  // what the line ReadLine last returned holds of the meter's pool
}

// meter is what a metered Reader takes room from (see Meter).
type meter struct {
	ctx  context.Context
	pool *budget.Pool
	free int
	wait time.Duration
}

// Meter makes r take room in pool for each line longer than free bytes before it reads past
// them: the most a line may have (r's limit, at most the whole pool, so that a line larger
// than the pool still passes when nothing else is held), waiting for it up to wait or until
// ctx ends. Once the line has ended the room is cut to the line's length, which the line keeps
// (Held) until the caller gives it back (pool.Release). A line that finds no room within the
// wait is skipped unread (ErrNoRoom); when ctx ends ReadLine returns ctx's error. A reader
// that holds its room never waits again before the line ends, so readers that share a pool
// cannot each hold part of it waiting for the rest.
func (r *Reader) Meter(ctx context.Context, pool *budget.Pool, free int, wait time.Duration) {
	r.meter = &meter{ctx: ctx, pool: pool, free: free, wait: wait}
}

// Held is the room the line ReadLine last returned holds of the pool of Meter (0 for a line
// of at most the free size): the caller gives it back with the pool's Release once it no
// longer holds the line, or hands it on (budget.Pool.Keep).
func (r *Reader) Held() int64 { return r.held }

// SkippedID is the id that the line the last ReadLine skipped (ErrTooLong, ErrNoRoom) answers, read as it
// went by without holding it (see AnswerID), or nil: a call waiting for it had its answer,
// only one too long to read.
func (r *Reader) SkippedID() json.RawMessage { return r.skipped }

// SkippedRequestID is the id of the request that the line the last ReadLine skipped
// (ErrTooLong, ErrNoRoom) was, read as it went by (a top-level object with a method member and one id, a
// string or a number), or nil: the id its refusal answers, so that the caller waiting for it
// learns that it was refused rather than waiting for ever.
func (r *Reader) SkippedRequestID() json.RawMessage { return r.request }

// NewReader returns a Reader over r that refuses lines longer than max bytes.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// ReadLine returns the next non-empty line without its line ending. The slice is owned by the
// caller. At the end of input it returns io.EOF (a last line without a newline is returned
// first).
func (r *Reader) ReadLine() ([]byte, error) {
	r.held = 0
	for {
		var line []byte
		var skip error // ErrTooLong or ErrNoRoom: the rest of the line is skipped unread
		var scan *idScan
		var held int64
		for {
			frag, err := r.r.ReadSlice('\n')
			if skip == nil && held == 0 && r.meter != nil && len(line)+len(frag) > r.meter.free {
				m := r.meter
				if !m.pool.Acquire(m.ctx, int64(r.max)+2, m.wait) {
					if err := m.ctx.Err(); err != nil {
						return nil, err
					}
					skip = ErrNoRoom
					scan = &idScan{}
					scan.feed(line)
					line = nil
				} else {
					held = min(int64(r.max)+2, m.pool.Total())
				}
			}
			switch {
			case skip != nil:
				scan.feed(frag)
			case len(line)+len(frag) > r.max+2:
				skip = ErrTooLong
				scan = &idScan{}
				scan.feed(line)
				scan.feed(frag)
				line = nil
			default:
				line = append(line, frag...)
			}
			if skip != nil && held > 0 {
				r.meter.pool.Release(held) // nothing of the line is kept
				held = 0
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil && (err != io.EOF || (len(line) == 0 && skip == nil)) {
				if held > 0 {
					r.meter.pool.Release(held)
				}
				return nil, err
			}
			break
		}
		if skip != nil {
			r.skipped, r.request = scan.result(), scan.requestID()
			return nil, skip
		}
		line = bytes.TrimRight(line, "\r\n")
		if held > 0 {
			keep := min(held, int64(len(line)))
			r.meter.pool.Release(held - keep)
			held = keep
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if held > 0 {
				r.meter.pool.Release(held)
			}
			continue
		}
		r.held = held
		return line, nil
	}
}

// Writer writes whole lines; it is safe for concurrent use and never interleaves two lines.
//
// Lines that arrive while another goroutine is writing are gathered and written together, in
// the order they arrived, by the goroutine that holds the write when its own write returns: n
// lines sent at once (the answers of one group commit, say) cost about two write calls, not n,
// and the reader wakes once for them. A Write returns when the write that carried its line has
// returned, with that write's error, so a caller still learns that its line was not delivered;
// but a line whose text went out whole before the write failed is delivered (the reader may
// have read it and acted on it: a request may have run), and its Write returns nil.
// The goroutine holding the write keeps writing while lines keep arriving; each of its rounds
// carries every line gathered during the one before.
type Writer struct {
	mu    sync.Mutex
	w     io.Writer
	busy  bool     // a goroutine is writing (guarded by mu)
	next  []byte   // lines gathered for the next write (guarded by mu)
	wait  *written // what the writers of next wait for; nil when next is empty
	spare []byte   // a buffer of an earlier write, reused (guarded by mu)
}

// written is the outcome of one write, shared by the Writes whose lines it carried.
type written struct {
	done chan struct{}
	n    int   // the bytes the write wrote; set before done is closed
	err  error // set before done is closed
}

// outcome is the error of the line that ends at end (its text, without the newline) in a
// write that wrote n bytes and failed with err: nil when its text went out whole. Before, every
// line of a failed write had the error, and a request the server had read whole (and run) was
// reported not sent.
func outcome(end, n int, err error) error {
	if err != nil && n >= end {
		return nil
	}
	return err
}

// maxSpare is the largest buffer a Writer keeps for reuse: a huge message's is dropped.
const maxSpare = 64 << 10

// NewWriter returns a Writer over w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes msg followed by a newline, in one write call with any lines gathered beside it.
func (w *Writer) Write(msg []byte) error {
	w.mu.Lock()
	if w.busy {
		w.next = append(w.next, msg...)
		end := len(w.next)
		w.next = append(w.next, '\n')
		if w.wait == nil {
			w.wait = &written{done: make(chan struct{})}
		}
		ours := w.wait
		w.mu.Unlock()
		<-ours.done
		return outcome(end, ours.n, ours.err)
	}
	w.busy = true
	buf := append(append(w.spare[:0], msg...), '\n')
	w.spare = nil
	w.mu.Unlock()

	n, err := w.w.Write(buf)
	err = outcome(len(msg), n, err)

	w.mu.Lock()
	for len(w.next) > 0 {
		// Swap buffers: the lines gathered meanwhile go out; this round's buffer gathers the
		// next ones.
		buf, w.next = w.next, buf[:0]
		theirs := w.wait
		w.wait = nil
		w.mu.Unlock()
		theirs.n, theirs.err = w.w.Write(buf)
		close(theirs.done)
		w.mu.Lock()
	}
	if cap(w.next) > maxSpare {
		w.next = nil
	}
	if cap(buf) <= maxSpare {
		w.spare = buf[:0]
	}
	w.busy = false
	w.mu.Unlock()
	return err
}

// oneLine returns raw unchanged when it holds no line break, else its compact form, so a
// spliced value can never split a message across lines.
func oneLine(raw json.RawMessage) json.RawMessage {
	if !bytes.ContainsAny(raw, "\r\n") {
		return raw
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// Request builds a request line (without the newline). params may be nil.
func Request(id json.RawMessage, method string, params json.RawMessage) []byte {
	b := append(make([]byte, 0, 48+len(id)+len(method)+len(params)), `{"jsonrpc":"2.0","id":`...)
	b = append(b, oneLine(id)...)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, method)
	if params != nil {
		b = append(b, `,"params":`...)
		b = append(b, oneLine(params)...)
	}
	return append(b, '}')
}

// Notification builds a notification line. params may be nil.
func Notification(method string, params json.RawMessage) []byte {
	b := append(make([]byte, 0, 48+len(method)+len(params)), `{"jsonrpc":"2.0","method":`...)
	b = appendJSONString(b, method)
	if params != nil {
		b = append(b, `,"params":`...)
		b = append(b, oneLine(params)...)
	}
	return append(b, '}')
}

// Response builds a success response line carrying result exactly as given.
func Response(id, result json.RawMessage) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b := append(make([]byte, 0, 40+len(id)+len(result)), `{"jsonrpc":"2.0","id":`...)
	b = append(b, oneLine(id)...)
	b = append(b, `,"result":`...)
	b = append(b, oneLine(result)...)
	return append(b, '}')
}

// ErrorResponse builds an error response line: e.Raw exactly as given when it is set, else
// the object made of e's fields.
func ErrorResponse(id json.RawMessage, e *Error) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b := append([]byte(`{"jsonrpc":"2.0","id":`), oneLine(id)...)
	if len(e.Raw) > 0 {
		b = append(b, `,"error":`...)
		b = append(b, oneLine(e.Raw)...)
		return append(b, '}')
	}
	b = append(b, `,"error":{"code":`...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, oneLine(e.Data)...)
	}
	return append(b, `}}`...)
}

// appendJSONString appends s as a JSON string (encoding/json's escaping, without HTML escapes).
func appendJSONString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain { // nothing to escape
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return append(b, bytes.TrimRight(buf.Bytes(), "\n")...)
}
