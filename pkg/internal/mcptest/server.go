// Package mcptest is a small real MCP stdio server for end-to-end tests. A test binary runs it
// by re-executing itself with MCPTEST_SERVE=1 (see MaybeServe), or runs the program
// mcptestserver (cmdtest.BuildServer), so tests talk to a real child process over real pipes.
//
// Every execution of a side-effecting tool appends one line to the file named by
// MCPTEST_EFFECTS, so a test counts executions from the server's own record, not from what
// the proxy reports.
//
// MCPTEST_MODE changes how the server misbehaves: "garbage" writes non-JSON lines to stdout
// around every answer; "exit" exits with status 3 at start; "mute" never answers initialize;
// "flood" sends FloodRequests roots/list requests to the client once initialized, never
// waiting for their answers, and logs "mcptest: flood refused N" on stderr for each error
// answer (N counting them); "reuse" sends two roots/list requests under one id once
// initialized ({"n":1} then {"n":2}, the second before the first is answered) and, 100 ms
// after the first answer comes back, cancels that id with the reason "reused id";
// "doubleids" answers a request whose id is an integer under that id spelled as a double
// (7 as 7.0: the same value, as a JSON library that reads every number as a double writes it);
// "headers" and "repeatprop" list one more tool (HeaderTool, RepeatTool); "twicelisted" lists
// one tool twice (TwiceListedTools); "casetools" adds a member "Tools" to the listing
// (CaseToolsMember); "relisted" lists balance without its readOnlyHint (a tool that may write)
// while the file named by the effects file's name and RelistedSuffix exists, read as each
// process starts, so a test changes the listing from one life of the server to the next, and
// declares tools.listChanged false: it never says its listing changed. In "relisted" mode too,
// each tools/list looks for two more files, named by the effects file's name and a suffix:
// while ListFailsSuffix's exists the listing is answered with an error, and while
// ListStopsSuffix's exists the server stops itself (SIGSTOP, where there is one) before it
// answers, and answers once continued; add_tool, in that mode, makes balance a tool that may
// write (and says list_changed).
package mcptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// FloodRequests is how many requests the "flood" mode sends.
const FloodRequests = 1500

// Environment variables the server reads.
const (
	EnvServe   = "MCPTEST_SERVE"
	EnvEffects = "MCPTEST_EFFECTS"
	EnvMode    = "MCPTEST_MODE"
	// EnvHTTP, when set to an address, makes the server serve Streamable HTTP there instead of
	// stdio (server_http.go).
	EnvHTTP = "MCPTEST_HTTP"
)

// MaybeServe runs the server and exits if EnvServe is set; call it first in TestMain.
func MaybeServe() {
	if os.Getenv(EnvServe) == "" {
		return
	}
	os.Exit(Serve())
}

// Env returns the environment entries that make a re-executed test binary serve, writing its
// effects to effects. GORACE drops the race detector's one-second sleep at exit.
func Env(effects, mode string) []string {
	return []string{EnvServe + "=1", EnvEffects + "=" + effects, EnvMode + "=" + mode, "GORACE=atexit_sleep_ms=0"}
}

// ToolsList is the tools/list result the server writes, byte for byte: unusual spacing, key
// order and keywords that a typed decoder would drop or reorder, so a proxy that re-encodes
// is caught.
const ToolsList = `{"tools":[` +
	`{"name":"charge","title":"Charge a card","description":"Charges a card once. Appends to the effects file.","inputSchema":{"type":"object","properties":{"amount":{"type":"integer","minimum":1},"order":{"type":"string"},"note":{"type":"string"},"idempotency_key":{"type":"string","description":"dedupe key"}},"required":["amount"],"additionalProperties":false,"$comment":"keep me"},"outputSchema":{"type":"object","properties":{"charge_id":{"type":"string"},"amount":{"type":"integer"}},"required":["charge_id"]},"annotations":{"destructiveHint":true,"idempotentHint":false,"openWorldHint":true},"execution":{"taskSupport":"forbidden"}},` +
	`{"name":"slow","description":"Sleeps ms milliseconds (and until the file until exists, when given), then records one effect.","inputSchema":{"type":"object","properties":{"ms":{"type":"integer"},"tag":{"type":"string"}}}},` +
	`{"name":"fail","description":"Records an attempt (once the file until exists, when given), then answers isError (card declined).","inputSchema":{"type":"object","properties":{"ms":{"type":"integer"},"tag":{"type":"string"}}}},` +
	`{"name":"die","description":"Records an effect, then kills its own process.","inputSchema":{"type":"object","properties":{"ms":{"type":"integer"},"tag":{"type":"string"}}}},` +
	`{"name":"balance","description":"Reads the balance (read only).","inputSchema":{"type":"object","properties":{}},"annotations":{"readOnlyHint":true}},` +
	`{"name":"add_tool","description":"Adds the tool \"extra\" and sends tools/list_changed.","inputSchema":{"type":"object"}},` +
	`{"name":"ask","description":"Asks the client for its roots (a request from server to client) and returns the answer.","inputSchema":{"type":"object"}},` +
	`{"name":"progress","description":"Sends n progress notifications and its result in one write (read only).","inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"tag":{"type":"string"}}},"annotations":{"readOnlyHint":true}},` +
	`{"name":"echo","description":"Returns its text; records nothing (for benchmarks).","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}},` +
	`{"name":"meta","description":"Returns the _meta of its request as text; records one effect.","inputSchema":{"type":"object","properties":{"tag":{"type":"string"}}}},` +
	`{"name":"confirm","description":"Multi round-trip (SEP-2322): without requestState asks for input (input_required); with it records one effect.","inputSchema":{"type":"object","properties":{"tag":{"type":"string"}}}},` +
	`{"name":"odd","description":"Records an effect; returns a result with a lone surrogate, a duplicate member and 1e400.","inputSchema":{"type":"object","properties":{"tag":{"type":"string"}}}},` +
	`{"name":"ünïcode \u2603","description":"Non-ASCII name, escaped \u00e9 and raw é \u003c\u003e","inputSchema":{"type":"object","properties":{"x":{"type":"number","multipleOf":0.5}},"examples":[{"x":1.50}]}}` +
	`]}`

// RPCRefusal is the JSON-RPC error object "fail" answers with when its arguments say
// "rpc":true, byte for byte: spacing, member order, escapes, a line separator, a lone
// surrogate, a code spelled as a decimal, members JSON-RPC does not define and data with
// numbers no double holds, so a proxy that decodes and re-encodes the error, or ignores an
// answer whose code is not spelled as an integer, is caught.
const RPCRefusal = `{"message":"declined <b>&amp;` + "\u2028" + ` \u00e9 \ud83d \/", "code":-32000.0,"data":{"big":1e400,"k":1,"k":2,"id":12345678901234567890123},"x-extra":true}`

// HeaderTool is the tool the "headers" mode lists besides ToolsList: its inputSchema asks HTTP
// clients to mirror arguments into Mcp-Param-* headers (SEP-2243), one of them nested.
const HeaderTool = `{"name":"transfer","description":"Moves money; records an effect.","inputSchema":{"type":"object","properties":{"account":{"type":"string","x-mcp-header":"Account"},"to":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}},"amount":{"type":"integer","x-mcp-header":"Amount"},"urgent":{"type":"boolean","x-mcp-header":"Urgent"}},"required":["account","amount"]}}`

// RepeatTool is the tool the "repeatprop" mode lists besides ToolsList: its input schema
// declares effectfence_repeat as an argument of its own.
const RepeatTool = `{"name":"own_repeat","description":"Takes effectfence_repeat as its own argument; records the arguments it received.","inputSchema":{"type":"object","properties":{"effectfence_repeat":{"type":"string"},"n":{"type":"integer"}}}}`

// OddTools is what the "oddannotations" mode lists besides ToolsList: "unlisted" with
// annotations of the wrong types (a server's bug, or its own reading of the schema), and an
// entry whose name is not a string.
const OddTools = `{"name":"unlisted","description":"Hints of the wrong types.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":"yes","destructiveHint":1,"idempotentHint":null}},{"name":7,"inputSchema":{"type":"object"}}`

// CaseHintTools is what the "casehints" mode lists besides ToolsList: "unlisted" with its
// read-only hint spelled "ReadOnlyHint", which MCP's SDKs do not read as readOnlyHint.
const CaseHintTools = `{"name":"unlisted","description":"A hint spelled otherwise.","inputSchema":{"type":"object"},"annotations":{"ReadOnlyHint":true}}`

// TwiceListedTools is what the "twicelisted" mode lists besides ToolsList: "unlisted" twice,
// once with no annotations (it may write) and then annotated readOnlyHint, as a server that
// registers one tool twice, or a listing merged from two sources, can write.
const TwiceListedTools = `{"name":"unlisted","description":"Listed twice: this one may write.","inputSchema":{"type":"object"}},{"name":"unlisted","description":"Listed twice: this one reads.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`

// CaseToolsMember is what the "casetools" mode writes after ToolsList's "tools", in the same
// result: a member "Tools" listing "charge" as read-only, which MCP's SDKs drop (the listing's
// tools are its "tools").
const CaseToolsMember = `"Tools":[{"name":"charge","description":"Spelled otherwise.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]`

// RelistedSuffix is added to the effects file's name to name the file that makes the
// "relisted" mode list balance as a tool that may write.
const RelistedSuffix = ".balance-writes"

// ListFailsSuffix and ListStopsSuffix name the files that make the "relisted" mode answer
// tools/list with an error, and stop itself on tools/list.
const (
	ListFailsSuffix = ".list-fails"
	ListStopsSuffix = ".list-stops"
)

const extraTool = `,{"name":"extra","description":"Added at run time.","inputSchema":{"type":"object"}}]}`

type server struct {
	asks    sync.Map // id -> chan *jsonrpc.Message, requests this server sent to the client
	out     *jsonrpc.Writer
	effects string
	mode    string
	extra   atomic.Bool
	seq     atomic.Int64
	mu      sync.Mutex
	eof     chan struct{} // closed when stdin ends
	// "stalelist": balance stops being read-only at the first listing asked with "hold" in
	// its params, and that listing is answered with the tools of before, after the next one.
	writes atomic.Bool
	relist chan struct{}
	// balanceWrites: "relisted" lists balance as a tool that may write in this process (from
	// its start when the file of RelistedSuffix exists, else once add_tool is called).
	balanceWrites atomic.Bool
	// version is the protocolVersion of the last initialize (a stdio server has one session).
	version atomic.Value
}

// Serve runs the server on stdin/stdout until stdin ends and returns the exit status.
func Serve() int {
	s := &server{out: jsonrpc.NewWriter(os.Stdout), effects: os.Getenv(EnvEffects), mode: os.Getenv(EnvMode), eof: make(chan struct{}), relist: make(chan struct{}, 1)}
	switch s.mode {
	case "exit":
		fmt.Fprintln(os.Stderr, "mcptest: exiting at start as asked")
		return 3
	case "garbage":
		fmt.Fprintln(os.Stdout, "this is not JSON")
	}
	if s.mode == "relisted" {
		_, err := os.Stat(s.effects + RelistedSuffix)
		s.balanceWrites.Store(err == nil)
	}
	if addr := os.Getenv(EnvHTTP); addr != "" {
		return s.serveHTTP(addr)
	}
	fmt.Fprintln(os.Stderr, "mcptest: serving")
	r := jsonrpc.NewReader(os.Stdin, 64<<20)
	var wg sync.WaitGroup
	var refused atomic.Int64 // "flood": error answers received
	var reused atomic.Int64  // "reuse": answers received
	for {
		line, err := r.ReadLine()
		if err != nil {
			break
		}
		m, err := jsonrpc.Parse(line)
		if err != nil {
			s.write(jsonrpc.ErrorResponse(nil, &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: err.Error()}))
			continue
		}
		if m.IsResponse() {
			if ch, ok := s.asks.LoadAndDelete(string(m.ID)); ok {
				ch.(chan *jsonrpc.Message) <- m
			}
			if s.mode == "flood" && m.Error != nil {
				fmt.Fprintf(os.Stderr, "mcptest: flood refused %d\n", refused.Add(1))
			}
			if s.mode == "reuse" && string(m.ID) == `"same"` && reused.Add(1) == 1 {
				time.AfterFunc(100*time.Millisecond, func() {
					s.write(jsonrpc.Notification("notifications/cancelled", json.RawMessage(`{"requestId":"same","reason":"reused id"}`)))
				})
			}
			continue
		}
		if s.mode == "flood" && m.Method == "notifications/initialized" {
			go func() {
				for i := range FloodRequests {
					s.write(jsonrpc.Request(json.RawMessage(fmt.Sprintf(`"flood-%d"`, i)), "roots/list", json.RawMessage(`{}`)))
				}
			}()
		}
		if s.mode == "reuse" && m.Method == "notifications/initialized" {
			s.write(jsonrpc.Request(json.RawMessage(`"same"`), "roots/list", json.RawMessage(`{"n":1}`)))
			s.write(jsonrpc.Request(json.RawMessage(`"same"`), "roots/list", json.RawMessage(`{"n":2}`)))
		}
		if m.Method == "notifications/cancelled" {
			fmt.Fprintf(os.Stderr, "mcptest: cancelled %s\n", m.Params)
		}
		if m.Method == "tools/call" && m.IsNotification() {
			// JSON-RPC says a notification gets no answer, not that it does not run: a
			// faithful server runs it.
			_, _ = s.call(m.Params)
			continue
		}
		if !m.IsRequest() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handle(m)
		}()
	}
	close(s.eof)
	if s.mode != "mute" { // a mute server's initialize never returns
		wg.Wait()
	}
	return 0
}

func (s *server) write(line []byte) {
	if s.mode == "garbage" {
		_ = s.out.Write([]byte("garbage {not json"))
	}
	_ = s.out.Write(line)
}

func (s *server) handle(m *jsonrpc.Message) {
	if m.Method == "tools/call" && (s.progress(m) || s.huge(m)) {
		return
	}
	res, rerr := s.dispatch(m)
	id := m.ID
	if s.mode == "doubleids" && len(id) > 0 && len(bytes.Trim(id, "-0123456789")) == 0 {
		id = append(slices.Clip(id), ".0"...)
	}
	if rerr != nil {
		s.write(jsonrpc.ErrorResponse(id, rerr))
		return
	}
	s.write(jsonrpc.Response(id, res))
	if lostTask(m.Method, res) {
		fmt.Fprintln(os.Stderr, "mcptest: exiting once the handle of a lost task is written")
		os.Exit(7)
	}
}

// lostTask says whether the answer res to a request of method is the handle of slow's lost
// task, or is about one: the server is lost once that handle is out, with the task's effect
// recorded. Over stdio it exits; over HTTP it answers 404 to the task's tasks/result and
// tasks/get, as a server does for a session it no longer knows (after a restart, say).
func lostTask(method string, b []byte) bool {
	return strings.Contains(string(b), `"taskId":"lost-`) && (method == "tools/call" || method == "tasks/result" || method == "tasks/get")
}

// balanceReads is balance's entry in ToolsList from its annotations on; StaleList's balance
// has none from the change on (it may write).
const balanceReads = `"inputSchema":{"type":"object","properties":{}},"annotations":{"readOnlyHint":true}}`

// staleList answers tools/list in the "stalelist" mode: a listing asked with "hold" is the
// tools of before balance began to write (list_changed); it is written after the next
// listing was answered, and a while after, as a busy server may answer an older request
// late.
func (s *server) staleList(params json.RawMessage, list string) (json.RawMessage, *jsonrpc.Error) {
	if !s.writes.Load() && strings.Contains(string(params), `"hold"`) {
		s.writes.Store(true)
		_ = s.out.Write(jsonrpc.Notification("notifications/tools/list_changed", nil))
		select {
		case <-s.relist:
		case <-s.eof:
		}
		time.Sleep(300 * time.Millisecond)
		return json.RawMessage(list), nil
	}
	if s.writes.Load() {
		list = strings.Replace(list, balanceReads, `"inputSchema":{"type":"object","properties":{}}}`, 1)
		select {
		case s.relist <- struct{}{}:
		default:
		}
	}
	return json.RawMessage(list), nil
}

func (s *server) dispatch(m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	switch m.Method {
	case "initialize":
		if s.mode == "mute" {
			select {} // never answers
		}
		var p struct {
			ProtocolVersion string          `json:"protocolVersion"`
			Capabilities    json.RawMessage `json:"capabilities"`
		}
		_ = json.Unmarshal(m.Params, &p)
		s.version.Store(p.ProtocolVersion)
		caps, _ := json.Marshal(string(p.Capabilities))
		changes := "true"
		if s.mode == "relisted" {
			changes = "false"
		}
		return json.RawMessage(`{"protocolVersion":` + strconv.Quote(p.ProtocolVersion) +
			`,"capabilities":{"tools":{"listChanged":` + changes + `},"resources":{},"prompts":{}},"serverInfo":{"name":"mcptest","version":"1"},"instructions":` + string(caps) + `}`), nil
	case "ping":
		return json.RawMessage(`{}`), nil
	case "tools/list":
		if s.mode == "dielist" {
			fmt.Fprintln(os.Stderr, "mcptest: dying on tools/list as asked")
			os.Exit(5)
		}
		if s.mode == "relisted" {
			if _, err := os.Stat(s.effects + ListFailsSuffix); err == nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "mcptest: tools/list fails as asked"}
			}
			if _, err := os.Stat(s.effects + ListStopsSuffix); err == nil {
				fmt.Fprintln(os.Stderr, "mcptest: stopping on tools/list as asked")
				stopSelf()
			}
		}
		list := ToolsList
		switch s.mode {
		case "headers":
			list = strings.TrimSuffix(list, "]}") + "," + HeaderTool + "]}"
		case "repeatprop":
			list = strings.TrimSuffix(list, "]}") + "," + RepeatTool + "]}"
		case "oddannotations":
			list = strings.TrimSuffix(list, "]}") + "," + OddTools + "]}"
		case "casehints":
			list = strings.TrimSuffix(list, "]}") + "," + CaseHintTools + "]}"
		case "twicelisted":
			list = strings.TrimSuffix(list, "]}") + "," + TwiceListedTools + "]}"
		case "casetools":
			list = strings.TrimSuffix(list, "}") + "," + CaseToolsMember + "}"
		}
		if s.extra.Load() {
			return json.RawMessage(strings.TrimSuffix(list, "]}") + extraTool), nil
		}
		if s.mode == "relisted" && s.balanceWrites.Load() {
			list = strings.Replace(list, balanceReads, `"inputSchema":{"type":"object","properties":{}}}`, 1)
		}
		if s.mode == "stalelist" {
			return s.staleList(m.Params, list)
		}
		return json.RawMessage(list), nil
	case "tools/call":
		return s.call(m.Params)
	case "tasks/result", "tasks/get":
		if strings.Contains(string(m.Params), `"forgotten-`) {
			// A task the server no longer knows while it still runs (an SDK server drops a task
			// whose ttl lapsed before it ended): both answer with an error.
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Task not found"}
		}
		if strings.Contains(string(m.Params), `"twofaced-`) {
			// A task whose tasks/get names its status twice, spelled two ways: "working" as
			// MCP spells it, "failed" as only a case-insensitive reader takes it.
			if m.Method == "tasks/get" {
				return json.RawMessage(`{"taskId":"twofaced","status":"working","Status":"failed","ttl":null,"createdAt":"2026-01-01T00:00:00Z"}`), nil
			}
			return nil, &jsonrpc.Error{Code: -32000, Message: "declined"}
		}
		if strings.Contains(string(m.Params), `"failed-`) {
			// A task that failed: its result is the JSON-RPC error its request met.
			if m.Method == "tasks/get" {
				return json.RawMessage(`{"taskId":"failed","status":"failed","ttl":null,"createdAt":"2026-01-01T00:00:00Z"}`), nil
			}
			return nil, &jsonrpc.Error{Code: -32000, Message: "declined"}
		}
		if strings.Contains(string(m.Params), `"asking-`) {
			// A task still running that asks for input: tasks/result answers with an interim
			// InputRequiredResult (SEP-2322's shape), not the task's final result.
			if m.Method == "tasks/get" {
				return json.RawMessage(`{"taskId":"asking","status":"input_required","ttl":null,"createdAt":"2026-01-01T00:00:00Z"}`), nil
			}
			return json.RawMessage(`{"resultType":"input_required","inputRequests":{"ok":{"method":"elicitation/create","params":{"message":"Really?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}},"requestState":"in-task"}`), nil
		}
		if strings.Contains(string(m.Params), `"flatfail-`) {
			if m.Method == "tasks/get" {
				return json.RawMessage(`{"resultType":"complete","taskId":"flatfail","status":"failed","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":60000,"error":{"code":-32000,"message":"declined"}}`), nil
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: tasks/result"}
		}
		if strings.Contains(string(m.Params), `"flat-`) {
			// slow's flat task (SEP-2663): completed, its result inline; no tasks/result.
			if m.Method == "tasks/get" {
				return json.RawMessage(`{"resultType":"complete","taskId":"flat","status":"completed","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":60000,"result":{"content":[{"type":"text","text":"flat task done"}],"isError":false}}`), nil
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: tasks/result"}
		}
		if strings.Contains(string(m.Params), `"inline-`) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + m.Method}
		}
		if strings.Contains(string(m.Params), `"unasked-`) {
			// slow's task of a call that asked for none (a 2025-11-25 handle): completed.
			if m.Method == "tasks/get" {
				return json.RawMessage(`{"taskId":"unasked","status":"completed","ttl":60000,"createdAt":"2026-01-01T00:00:00Z"}`), nil
			}
			return text("unasked task done", false), nil
		}
		if m.Method == "tasks/get" {
			return json.RawMessage(`{"taskId":"stuck","status":"working","ttl":null,"createdAt":"2026-01-01T00:00:00Z"}`), nil
		}
		// The only other tasks are slow's stuck ones: their result never comes.
		fmt.Fprintf(os.Stderr, "mcptest: tasks/result %s waits until stdin ends\n", m.Params)
		<-s.eof
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server is stopping"}
	case "resources/list":
		return json.RawMessage(`{"resources":[{"uri":"mem://effects","name":"effects","mimeType":"text/plain"}]}`), nil
	case "resources/read":
		n := s.count()
		return json.RawMessage(fmt.Sprintf(`{"contents":[{"uri":"mem://effects","mimeType":"text/plain","text":"%d effects"}]}`, n)), nil
	case "prompts/list":
		return json.RawMessage(`{"prompts":[{"name":"greet","description":"Says hello"}]}`), nil
	case "prompts/get":
		return json.RawMessage(`{"messages":[{"role":"user","content":{"type":"text","text":"hello"}}]}`), nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + m.Method}
}

// progress serves the tool "progress": n notifications/progress for the request's
// progressToken, then the result, all in one write to stdout, so a reader receives them in
// one read and any reordering on its side shows.
// HugeAnswer is the size of the text of the "huge" tool's result: a line longer than the
// 64 MiB a client reads.
const HugeAnswer = 64<<20 + 1

// huge answers the "huge" tool (an effect, recorded) with a result line longer than a
// client reads, its id last, as the TypeScript SDK writes a response: {"result":…,"jsonrpc",
// "id"}. The argument "size", when positive, is the length of the text instead (a large
// answer a client does read).
func (s *server) huge(m *jsonrpc.Message) bool {
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			Size int `json:"size"`
		} `json:"arguments"`
	}
	if json.Unmarshal(m.Params, &p) != nil || p.Name != "huge" {
		return false
	}
	size := HugeAnswer
	if p.Arguments.Size > 0 {
		size = p.Arguments.Size
	}
	s.record(fmt.Sprintf("huge size=%d", size))
	line := make([]byte, 0, size+128)
	line = append(line, `{"result":{"content":[{"type":"text","text":"`...)
	line = append(line, strings.Repeat("y", size)...)
	line = append(line, `"}]},"jsonrpc":"2.0","id":`...)
	line = append(append(line, m.ID...), '}')
	s.write(line)
	return true
}

func (s *server) progress(m *jsonrpc.Message) bool {
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			N   int    `json:"n"`
			Tag string `json:"tag"`
		} `json:"arguments"`
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if json.Unmarshal(m.Params, &p) != nil || p.Name != "progress" {
		return false
	}
	var buf []byte
	for i := 1; i <= p.Arguments.N && p.Meta.ProgressToken != nil; i++ {
		params := fmt.Sprintf(`{"progressToken":%s,"progress":%d,"total":%d}`, p.Meta.ProgressToken, i, p.Arguments.N)
		buf = append(append(buf, jsonrpc.Notification("notifications/progress", json.RawMessage(params))...), '\n')
	}
	res := text(fmt.Sprintf("progress done n=%d tag=%s", p.Arguments.N, p.Arguments.Tag), false)
	buf = append(buf, jsonrpc.Response(m.ID, res)...)
	s.write(buf) // the writer ends the line
	return true
}

type callParams struct {
	Name string `json:"name"`
	Task *struct {
		TTL json.RawMessage `json:"ttl"`
	} `json:"task"`
	RequestState string          `json:"requestState"`
	Meta         json.RawMessage `json:"_meta"`
	Arguments    struct {
		Amount         int    `json:"amount"`
		Order          string `json:"order"`
		Ms             int    `json:"ms"`
		Tag            string `json:"tag"`
		Text           string `json:"text"`
		IdempotencyKey string `json:"idempotency_key"`
		RPC            bool   `json:"rpc"`
		Forget         bool   `json:"forget"`
		Lose           bool   `json:"lose"`
		TwoFaced       bool   `json:"twofaced"`
		TwoHandles     bool   `json:"two_handles"`
		Malformed      bool   `json:"malformed"`
		TwoWays        bool   `json:"two_ways"`
		Both           bool   `json:"both"`
		Pad            int    `json:"pad"`
		Echo           bool   `json:"echo"`
		Escaped        bool   `json:"escaped"`
		Answer         string `json:"answer"`
		Until          string `json:"until"`
		Cut            int    `json:"cut"`
		AskInTask      bool   `json:"ask_in_task"`
		Flat           bool   `json:"flat"`
		Unasked        bool   `json:"unasked"`
		Inline         bool   `json:"inline"`
		CloseStdout    bool   `json:"close_stdout"`
		MRTROnly       bool   `json:"mrtr_only"`
	} `json:"arguments"`
}

// record appends one effect line and returns its number in this process.
func (s *server) record(line string) int64 {
	n := s.seq.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.effects == "" {
		return n
	}
	f, err := os.OpenFile(s.effects, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		return n
	}
	defer f.Close()
	fmt.Fprintf(f, "%s pid=%d n=%d\n", line, os.Getpid(), n)
	_ = f.Sync()
	return n
}

func (s *server) count() int {
	if s.effects == "" {
		return 0
	}
	b, _ := os.ReadFile(s.effects)
	return strings.Count(string(b), "\n")
}

func text(t string, isError bool) json.RawMessage {
	q, _ := json.Marshal(t)
	return json.RawMessage(`{"content":[{"type":"text","text":` + string(q) + `}],"isError":` + strconv.FormatBool(isError) + `}`)
}

func (s *server) call(params json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	var p callParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "bad tools/call params: " + err.Error()}
	}
	a := p.Arguments
	sleep := func() { time.Sleep(time.Duration(a.Ms) * time.Millisecond) }
	switch p.Name {
	case "transfer":
		var q struct {
			Arguments struct {
				Account string `json:"account"`
				To      struct {
					Region string `json:"region"`
				} `json:"to"`
			} `json:"arguments"`
		}
		_ = json.Unmarshal(params, &q)
		t := q.Arguments
		s.record(fmt.Sprintf("transfer account=%s region=%s amount=%d", t.Account, t.To.Region, a.Amount))
		return text(fmt.Sprintf("moved %d from %s", a.Amount, t.Account), false), nil
	case "charge":
		if a.Amount <= 0 {
			return text("amount must be a positive integer", true), nil
		}
		n := s.record(fmt.Sprintf("charge amount=%d order=%s key=%s", a.Amount, a.Order, a.IdempotencyKey))
		id := fmt.Sprintf("ch_%d_%d_%d", os.Getpid(), n, time.Now().UnixNano())
		return json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"charged %d as %s"}],"structuredContent":{"charge_id":%q,"amount":%d},"isError":false}`, a.Amount, id, id, a.Amount)), nil
	case "slow":
		if a.Flat {
			// A task handle as the tasks extension (SEP-2663, MCP 2026-07-28) writes it: flat,
			// resultType "task", answered to a call that did not ask for a task. The task
			// completes: tasks/get answers it completed, its result inline.
			n := s.record("slow flat task tag=" + a.Tag)
			prefix := "flat"
			if a.RPC {
				prefix = "flatfail" // tasks/get answers it failed, its JSON-RPC error inline
			}
			ttl := 60000
			if a.Ms > 0 {
				ttl = a.Ms // a failed task's "failed" then comes at the end of its ttl
			}
			return json.RawMessage(fmt.Sprintf(`{"resultType":"task","taskId":"%s-%d-%d","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":%d,"pollIntervalMs":50}`, prefix, os.Getpid(), n, ttl)), nil
		}
		if a.Inline {
			// A tool result (its content) that also carries a member named task, naming a
			// task: a result, not a handle (a CreateTaskResult has no content). This server
			// has no tasks: tasks/result and tasks/get of it are unknown methods.
			n := s.record("slow inline tag=" + a.Tag)
			return json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"done inline"}],"task":{"taskId":"inline-%d-%d","status":"completed"}}`, os.Getpid(), n)), nil
		}
		if a.Unasked {
			// A handle as MCP 2025-11-25 writes it (nested, no resultType) answered to a call
			// that asked for no task, as a server that runs the tool as a task regardless
			// might; the task completes (tasks/result answers its result).
			n := s.record("slow unasked task tag=" + a.Tag)
			return json.RawMessage(fmt.Sprintf(`{"task":{"taskId":"unasked-%d-%d","status":"working","ttl":60000,"createdAt":"2026-01-01T00:00:00Z"}}`, os.Getpid(), n)), nil
		}
		if p.Task != nil {
			// A task that never ends: the handle, with the ttl asked for, and a tasks/result
			// that never answers (stuckTask).
			n := s.record("slow task tag=" + a.Tag)
			fmt.Fprintf(os.Stderr, "mcptest: slow task tag=%s started\n", a.Tag)
			ttl := "null"
			if len(p.Task.TTL) > 0 {
				ttl = string(p.Task.TTL)
			}
			prefix := "stuck"
			switch {
			case a.Forget:
				prefix = "forgotten" // tasks/result and tasks/get answer "Task not found"
			case a.Lose:
				prefix = "lost" // the server is lost once it has answered the handle (lostTask)
			case a.RPC && a.TwoFaced:
				prefix = "twofaced" // tasks/result answers a JSON-RPC error, tasks/get "working" and "Status":"failed"
			case a.RPC:
				prefix = "failed" // tasks/result answers a JSON-RPC error, tasks/get "failed"
			case a.AskInTask:
				prefix = "asking" // tasks/result answers input_required, tasks/get "input_required"
			}
			other := ""
			if a.TwoHandles {
				// The handle given twice, the second spelled otherwise and empty: MCP's SDKs
				// read the first, a case-insensitive reader the second (no task).
				other = `,"Task":{"taskId":"","status":"completed"}`
			}
			return json.RawMessage(fmt.Sprintf(`{"task":{"taskId":"%s-%d-%d","status":"working","ttl":%s,"createdAt":"2026-01-01T00:00:00Z"}%s}`, prefix, os.Getpid(), n, ttl, other)), nil
		}
		fmt.Fprintf(os.Stderr, "mcptest: slow tag=%s started\n", a.Tag) // tests wait for it before cancelling
		sleep()
		for a.Until != "" { // a test lets the call end by creating the file
			if _, err := os.Stat(a.Until); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		n := s.record("slow tag=" + a.Tag)
		return text(fmt.Sprintf("slow done n=%d pid=%d t=%d", n, os.Getpid(), time.Now().UnixNano()), false), nil
	case "fail":
		sleep()
		if a.Until != "" { // a test lets the call end by creating the file
			fmt.Fprintf(os.Stderr, "mcptest: fail tag=%s started\n", a.Tag)
			for {
				if _, err := os.Stat(a.Until); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		n := s.record("fail tag=" + a.Tag)
		if a.RPC {
			return nil, &jsonrpc.Error{Code: -32000, Message: "declined", Raw: json.RawMessage(RPCRefusal)}
		}
		if a.Echo {
			// As servers often do, the refusal repeats what it was given.
			return nil, &jsonrpc.Error{Code: -32000, Message: "declined: card " + a.Tag + " refused"}
		}
		if a.TwoWays {
			// An answer parsers read two ways: an error, and (read case-insensitively, as
			// encoding/json does) a result beside it.
			return nil, &jsonrpc.Error{Raw: json.RawMessage(`{"code":-32000,"message":"declined"},"Result":{"content":[{"type":"text","text":"charged"}],"isError":false}`)}
		}
		if a.Both {
			// A result beside the error: a success to one reader, a failure to another.
			return nil, &jsonrpc.Error{Raw: json.RawMessage(`{"code":-32000,"message":"declined"},"result":{"content":[{"type":"text","text":"charged"}],"isError":false}`)}
		}
		if a.Answer != "" {
			// A result whose last members are given: isError spelled otherwise, say.
			return json.RawMessage(`{"content":[{"type":"text","text":"card declined"}],` + a.Answer + `}`), nil
		}
		if a.Malformed {
			// An answer that is not a JSON-RPC response: "error" must be an object.
			return nil, &jsonrpc.Error{Raw: json.RawMessage(`"the server broke"`)}
		}
		return text(fmt.Sprintf("card declined (attempt %d)", n), true), nil
	case "die":
		sleep()
		s.record("die tag=" + a.Tag)
		if a.CloseStdout {
			// Half dead: its stdout closed, it runs on (reading stdin, this call never ending)
			// until it is stopped.
			fmt.Fprintf(os.Stderr, "mcptest: closing stdout on tools/call, pid %d\n", os.Getpid())
			os.Stdout.Close()
			select {}
		}
		// As a crashing server often does, it writes the request it died on to its stderr.
		line := fmt.Sprintf("mcptest: dying on tools/call %s\n", params)
		if a.Cut > 0 {
			// It dies half way through the line: the last cut bytes are never written.
			line = line[:max(0, len(line)-a.Cut)]
		}
		os.Stderr.WriteString(line)
		os.Exit(7)
	case "balance":
		n := s.record("balance")
		return text(fmt.Sprintf("balance read %d", n), false), nil
	case "add_tool":
		if s.mode == "relisted" {
			s.balanceWrites.Store(true) // the change it announces: balance may write
		} else {
			s.extra.Store(true)
		}
		_ = s.out.Write(jsonrpc.Notification("notifications/tools/list_changed", nil))
		return text("added", false), nil
	case "ask":
		id := fmt.Sprintf(`"ask-%d"`, s.seq.Add(1))
		ch := make(chan *jsonrpc.Message, 1)
		s.asks.Store(id, ch)
		params := json.RawMessage(`{}`)
		if a.Pad > 0 { // a request padded past what a client reads
			params = json.RawMessage(`{"_meta":{"pad":"` + strings.Repeat("p", a.Pad) + `"}}`)
		}
		s.write(jsonrpc.Request(json.RawMessage(id), "roots/list", params))
		fmt.Fprintf(os.Stderr, "mcptest: asked %s\n", id) // tests wait for it
		select {
		case m := <-ch:
			if m.Error != nil {
				return text("client error: "+m.Error.Message, true), nil
			}
			return text("client said: "+string(m.Result), false), nil
		case <-time.After(10 * time.Second):
			return text("client did not answer", true), nil
		case <-cancelAfter(a.Ms):
			// ms > 0: give up on the request and say so, as a server may.
			s.asks.Delete(id)
			s.write(jsonrpc.Notification("notifications/cancelled", json.RawMessage(`{"requestId":`+id+`,"reason":"took too long"}`)))
			return text("ask cancelled", false), nil
		}
	case "echo":
		return text("echo "+a.Text, false), nil
	case "meta":
		s.record("meta tag=" + a.Tag)
		return text("meta "+string(p.Meta), false), nil
	case "confirm":
		if p.RequestState == "" {
			if a.Until != "" {
				// The first round is held until a test creates the file.
				fmt.Fprintf(os.Stderr, "mcptest: confirm tag=%s asking\n", a.Tag)
				for {
					if _, err := os.Stat(a.Until); err == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			if v, _ := s.version.Load().(string); a.MRTROnly && v < "2026-07-28" {
				// Multi round-trip requests came with MCP 2026-07-28: a client that negotiated
				// an earlier version cannot read input_required, so it is not asked.
				n := s.record("confirm tag=" + a.Tag + " unasked version=" + v)
				return text(fmt.Sprintf("confirmed unasked n=%d", n), false), nil
			}
			if a.Escaped {
				// The same answer, its resultType spelled with an escape, as JSON allows.
				return json.RawMessage(`{"resultType":"input\u005frequired","inputRequests":{"ok":{"method":"elicitation/create","params":{"message":"Really?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}},"requestState":"state-` + a.Tag + `"}`), nil
			}
			return json.RawMessage(`{"resultType":"input_required","inputRequests":{"ok":{"method":"elicitation/create","params":{"message":"Really?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}},"requestState":"state-` + a.Tag + `"}`), nil
		}
		n := s.record("confirm tag=" + a.Tag + " state=" + p.RequestState)
		return text(fmt.Sprintf("confirmed n=%d", n), false), nil
	case "odd":
		// A result a canonicaliser refuses: a string cut inside an emoji (lone surrogate),
		// a duplicate member, a number beyond double range, odd spacing and "<".
		n := s.record("odd tag=" + a.Tag)
		return json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"cut \ud83d <b> n=%d"}], "structuredContent":{"big":1e400,"k":1,"k":2},"isError":false}`, n)), nil
	case "extra":
		return text("extra ran", false), nil
	case "own_repeat":
		var q struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		_ = json.Unmarshal(params, &q)
		n := s.record("own_repeat " + string(q.Arguments))
		return text(fmt.Sprintf("own_repeat ran n=%d", n), false), nil
	case "unlisted":
		// A tool the server runs but never lists (hidden, or listed only to some clients).
		n := s.record("unlisted tag=" + a.Tag)
		return text(fmt.Sprintf("unlisted ran n=%d", n), false), nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown tool: " + p.Name}
}

// cancelAfter is a channel that fires after ms milliseconds, or never when ms <= 0.
func cancelAfter(ms int) <-chan time.Time {
	if ms <= 0 {
		return nil
	}
	return time.After(time.Duration(ms) * time.Millisecond)
}

// Effects returns the lines of an effects file (none if it does not exist).
func Effects(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// ReuseAnswers is a client's handler of the "reuse" mode's two requests under one id: the
// first ({"n":1}) is answered once the second is being answered; the second waits up to 10 s
// for its context to end, and cause receives what ended it (nil when nothing did).
func ReuseAnswers() (answer func(ctx context.Context, method string, p json.RawMessage) (json.RawMessage, error), cause <-chan error) {
	second := make(chan struct{})
	ended := make(chan error, 1)
	return func(ctx context.Context, method string, p json.RawMessage) (json.RawMessage, error) {
		if string(p) == `{"n":1}` {
			<-second
			return json.RawMessage(`{"roots":[]}`), nil
		}
		close(second)
		select {
		case <-ctx.Done():
			ended <- context.Cause(ctx)
		case <-time.After(10 * time.Second):
			ended <- nil
		}
		return json.RawMessage(`{"roots":[]}`), nil
	}, ended
}
