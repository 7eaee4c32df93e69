package history

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// EnvChild names the effects file of the child MCP server. A binary that calls MaybeServeChild
// first thing serves as that child when it is set.
const EnvChild = "EFFECTFENCE_HISTORY_CHILD"

// EnvSlot tells the child which wrap started it ("SLOT.GEN": the wrap slot and that slot's
// generation, as an Op names them); the wrap passes its environment on to its child, and
// every execution is recorded with it.
const EnvSlot = "EFFECTFENCE_HISTORY_SLOT"

// ToolEffect is the child's one tool. Its arguments are {"op": KEY, "ms": N}: it works for N
// milliseconds, then performs the effect, which is appending one line to the effects file and
// syncing it to disk, and then answers with the execution's id.
const ToolEffect = "effect"

const childTools = `{"tools":[{"name":"effect","description":"Performs the effect op once: works ms milliseconds, then records one execution durably and returns its id.","inputSchema":{"type":"object","properties":{"op":{"type":"string"},"ms":{"type":"integer"}},"required":["op"]},"annotations":{"destructiveHint":true,"idempotentHint":false}}]}`

// Execution is one line of the effects file: one execution of the effect.
type Execution struct {
	Exec string `json:"exec"`
	Op   string `json:"op"`
	Pid  int    `json:"pid"`
	At   int64  `json:"at_unix_ms"`
	// Slot is the wrap whose child ran it ("SLOT.GEN", EnvSlot); empty in histories recorded
	// before it was.
	Slot string `json:"slot,omitempty"`
}

// Answer is the structuredContent of a successful effect call.
type Answer struct {
	Exec string `json:"exec"`
	Op   string `json:"op"`
}

// MaybeServeChild serves the child MCP server on stdin/stdout and exits, if EnvChild is set.
func MaybeServeChild() {
	path := os.Getenv(EnvChild)
	if path == "" {
		return
	}
	os.Exit(serveChild(path))
}

// serveChild is a deliberately plain MCP stdio server: every tools/call runs on its own
// goroutine, so a stuck call never blocks the others, and stdin's end exits at once (a call in
// progress dies with the process, as in a crash).
func serveChild(path string) int {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "history child:", err)
		return 1
	}
	out := jsonrpc.NewWriter(os.Stdout)
	var mu sync.Mutex // one append+fsync at a time, so lines never interleave
	r := jsonrpc.NewReader(os.Stdin, 1<<20)
	for {
		line, err := r.ReadLine()
		if err != nil {
			return 0
		}
		m, err := jsonrpc.Parse(line)
		if err != nil || !m.IsRequest() {
			continue
		}
		go func() {
			res, rerr := childAnswer(m, f, &mu)
			if rerr != nil {
				_ = out.Write(jsonrpc.ErrorResponse(m.ID, rerr))
				return
			}
			_ = out.Write(jsonrpc.Response(m.ID, res))
		}()
	}
}

func childAnswer(m *jsonrpc.Message, f *os.File, mu *sync.Mutex) (json.RawMessage, *jsonrpc.Error) {
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(m.Params, &p)
		return json.RawMessage(`{"protocolVersion":` + strconv.Quote(p.ProtocolVersion) + `,"capabilities":{"tools":{}},"serverInfo":{"name":"history-child","version":"1"}}`), nil
	case "ping":
		return json.RawMessage(`{}`), nil
	case "tools/list":
		return json.RawMessage(childTools), nil
	case "tools/call":
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + m.Method}
	}
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			Op string `json:"op"`
			Ms int    `json:"ms"`
		} `json:"arguments"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || p.Name != ToolEffect || p.Arguments.Op == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "want tools/call effect {op, ms}"}
	}
	time.Sleep(time.Duration(p.Arguments.Ms) * time.Millisecond)
	var b [8]byte
	_, _ = rand.Read(b[:])
	ex := Execution{Exec: fmt.Sprintf("x%d-%s", os.Getpid(), hex.EncodeToString(b[:])), Op: p.Arguments.Op, Pid: os.Getpid(), At: time.Now().UnixMilli(), Slot: os.Getenv(EnvSlot)}
	line, _ := json.Marshal(ex)
	mu.Lock()
	_, werr := f.Write(append(line, '\n'))
	if werr == nil {
		werr = f.Sync()
	}
	mu.Unlock()
	if werr != nil {
		// The effect may be half-recorded: die like a crash rather than answer anything.
		fmt.Fprintln(os.Stderr, "history child: recording the effect:", werr)
		os.Exit(3)
	}
	sc, _ := json.Marshal(Answer{Exec: ex.Exec, Op: ex.Op})
	text, _ := json.Marshal(fmt.Sprintf("executed %s as %s", ex.Op, ex.Exec))
	return json.RawMessage(`{"content":[{"type":"text","text":` + string(text) + `}],"structuredContent":` + string(sc) + `,"isError":false}`), nil
}
