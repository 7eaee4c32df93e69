package serve_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// sqliteEngine is an engine on a new SQLite ledger file, closed when the test ends.
func sqliteEngine(t *testing.T) *fence.Engine {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng := fence.New(st, fence.Config{})
	t.Cleanup(func() { eng.Close() })
	return eng
}

// serveCall sends one tools/call line over c and returns its structuredContent and isError,
// or the JSON-RPC error's message when there is no result.
func serveCall(t *testing.T, c *stdioClient, id int, tool, args string) (json.RawMessage, bool, string) {
	t.Helper()
	sid := strconv.Itoa(id)
	raw := recv(t, c.sendLine(sid, `{"jsonrpc":"2.0","id":`+sid+`,"method":"tools/call","params":{"name":"`+tool+`","arguments":`+args+`}}`), tool, 10*time.Second)
	var r struct {
		Result *struct {
			StructuredContent json.RawMessage `json:"structuredContent"`
			IsError           bool            `json:"isError"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || (r.Result == nil && r.Error == nil) {
		t.Fatalf("%s %s: %s", tool, args, raw)
	}
	if r.Result == nil {
		return nil, false, r.Error.Message
	}
	return r.Result.StructuredContent, r.Result.IsError, ""
}

// Numbers beyond float64's range are the fence's like any other: mcp-go decoded a call's
// arguments into Go values before any tool ran and answered -32600 for 1e400, so an action
// whose arguments held one could not be fenced, and a holder whose effect returned one could
// never commit it (the effect ran; its outcome could only be aborted into a fenced unknown).
// Over real pipes, on a SQLite ledger.
func TestNumbersBeyondFloat64(t *testing.T) {
	t.Parallel()
	c := startStdio(t, sqliteEngine(t), serve.Options{})

	raw, isErr, rpcErr := serveCall(t, c, 1, serve.ToolPrepare, `{"intent":"pay:big","tool":"pay","args":{"amount":1e400,"n":-0}}`)
	var p serve.PrepareResult
	if isErr || rpcErr != "" || json.Unmarshal(raw, &p) != nil || p.Ticket == nil {
		t.Fatalf("prepare with 1e400 in args: %s %s", raw, rpcErr)
	}
	tk, _ := json.Marshal(p.Ticket)
	const result = `{"balance":1e400, "tiny":-1E-400}`
	raw, isErr, rpcErr = serveCall(t, c, 2, serve.ToolCommit, `{"ticket":`+string(tk)+`,"result":`+result+`}`)
	var cr serve.CommitResult
	if isErr || rpcErr != "" || json.Unmarshal(raw, &cr) != nil || cr.Cert == nil || string(cr.Cert.Result) != result || cr.Cert.Verify() != nil {
		t.Fatalf("commit of a result holding 1e400: %s %s", raw, rpcErr)
	}
	// The same call spelled otherwise is replayed; another number is another call.
	raw, isErr, rpcErr = serveCall(t, c, 3, serve.ToolPrepare, `{"intent":"pay:big","tool":"pay","args":{"n":0,"amount":10e399}}`)
	if isErr || rpcErr != "" || json.Unmarshal(raw, &p) != nil || p.Status != serve.StatusAlreadyDone || p.Cert.Hash != cr.Cert.Hash || string(p.Cert.Result) != result {
		t.Fatalf("duplicate: %s %s", raw, rpcErr)
	}
	raw, isErr, _ = serveCall(t, c, 4, serve.ToolPrepare, `{"intent":"pay:big","tool":"pay","args":{"amount":1e401,"n":0}}`)
	var ref serve.Refusal
	if !isErr || json.Unmarshal(raw, &ref) != nil || ref.Code != fence.CodeConflict {
		t.Fatalf("another number under the same intent: %s", raw)
	}
	// Out of range where the schema bounds it: refused by the tool, with its code.
	raw, isErr, _ = serveCall(t, c, 5, serve.ToolPrepare, `{"intent":"pay:w","tool":"pay","wait_secs":1e400}`)
	if !isErr || json.Unmarshal(raw, &ref) != nil || ref.Code != fence.CodeInvalid || ref.Field != "wait_secs" {
		t.Fatalf("wait_secs 1e400: %s", raw)
	}
}

// A commit retried with the ticket that committed is answered by comparing results, whatever
// either holds: the same exact bytes get the cert; another result is result_differs with the
// cert and executed true. A result with no canonical form (a member written twice, a lone
// surrogate) on either side was answered invalid_request or store_error, "nothing ran",
// though the effect had run and was recorded.
func TestRetriedCommitComparesAnyResult(t *testing.T) {
	t.Parallel()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	const odd = `{"k":1,"k":2,"s":"cut \ud83d"}`
	id := 0
	for i, tc := range []struct{ first, retry string }{
		{odd, `{"k":2,"s":"x"}`},
		{`{"k":2}`, odd},
		{odd, `{"k":1, "k":2,"s":"cut \ud83d"}`},
	} {
		id++
		raw, isErr, _ := serveCall(t, c, id, serve.ToolPrepare, `{"intent":"retry:`+strconv.Itoa(i)+`","tool":"t"}`)
		var p serve.PrepareResult
		if isErr || json.Unmarshal(raw, &p) != nil || p.Ticket == nil {
			t.Fatalf("prepare: %s", raw)
		}
		tk, _ := json.Marshal(p.Ticket)
		commit := func(result string) (json.RawMessage, bool) {
			id++
			raw, isErr, rpcErr := serveCall(t, c, id, serve.ToolCommit, `{"ticket":`+string(tk)+`,"result":`+result+`}`)
			if rpcErr != "" {
				t.Fatalf("commit %s: %s", result, rpcErr)
			}
			return raw, isErr
		}
		raw, isErr = commit(tc.first)
		var first serve.CommitResult
		if isErr || json.Unmarshal(raw, &first) != nil || first.Cert == nil {
			t.Fatalf("first commit %s: %s", tc.first, raw)
		}
		raw, isErr = commit(tc.first)
		var again serve.CommitResult
		if isErr || json.Unmarshal(raw, &again) != nil || again.Cert == nil || again.Cert.Hash != first.Cert.Hash {
			t.Fatalf("retry with the same bytes %s: %s", tc.first, raw)
		}
		raw, isErr = commit(tc.retry)
		var ref serve.Refusal
		if !isErr || json.Unmarshal(raw, &ref) != nil || ref.Code != serve.CodeResultDiffers || !ref.Executed || ref.Cert == nil || ref.Cert.Hash != first.Cert.Hash {
			t.Fatalf("retry of %s with %s: want result_differs with the cert, got %s", tc.first, tc.retry, raw)
		}
	}
}

// A ticket handed back with its token or seq spelled as another JSON number of the same
// integer (2.0, 2e0: a client that keeps numbers as doubles, JSON Schema's "integer" accepts
// both) is that ticket. encoding/json refused them after the schema had passed them, so a
// commit whose effect ran was refused as invalid_request. A number that is not the integer
// (2.5) or out of range (-1, 2^64) is still refused, and nothing is recorded.
func TestTicketNumbersInAnySpelling(t *testing.T) {
	t.Parallel()
	c := startStdio(t, sqliteEngine(t), serve.Options{})

	raw, isErr, rpcErr := serveCall(t, c, 1, serve.ToolPrepare, `{"intent":"pay:spelled","tool":"pay","args":{"amount":5},"domain":"acct"}`)
	var p serve.PrepareResult
	if isErr || rpcErr != "" || json.Unmarshal(raw, &p) != nil || p.Ticket == nil || p.Ticket.Token == 0 || p.Ticket.Seq == 0 {
		t.Fatalf("prepare: %s %s", raw, rpcErr)
	}
	ticket := func(token, seq string) string {
		return `{"intent":"pay:spelled","token":` + token + `,"nonce":"` + p.Ticket.Nonce + `","domain":"acct","seq":` + seq + `}`
	}
	tok, seq := strconv.FormatUint(p.Ticket.Token, 10), strconv.FormatUint(p.Ticket.Seq, 10)
	for i, bad := range []string{ticket(tok+".5", seq), ticket("-"+tok, seq), ticket("18446744073709551616", seq), ticket(tok, seq+".5"), ticket(`"`+tok+`"`, seq), ticket("1e999999999", seq), ticket(tok+"e-999999999", seq)} {
		raw, isErr, rpcErr = serveCall(t, c, 10+i, serve.ToolHeartbeat, `{"ticket":`+bad+`}`)
		var ref serve.Refusal
		if rpcErr == "" && (!isErr || json.Unmarshal(raw, &ref) != nil || ref.Code != fence.CodeInvalid) {
			t.Fatalf("heartbeat with ticket %s: %s; want invalid_request", bad, raw)
		}
	}
	raw, isErr, rpcErr = serveCall(t, c, 2, serve.ToolHeartbeat, `{"ticket":`+ticket(tok+".0", seq+"e0")+`}`)
	if isErr || rpcErr != "" {
		t.Fatalf("heartbeat with token %s.0 and seq %se0: %s %s", tok, seq, raw, rpcErr)
	}
	raw, isErr, rpcErr = serveCall(t, c, 3, serve.ToolCommit, `{"ticket":`+ticket(tok+"0e-1", seq+".000")+`,"result":{"ok":true}}`)
	var cr serve.CommitResult
	if isErr || rpcErr != "" || json.Unmarshal(raw, &cr) != nil || cr.Cert == nil {
		t.Fatalf("commit with token %s0e-1: %s %s", tok, raw, rpcErr)
	}
}

// A read set's seq and a vector clock's counters spelled as another JSON number of the same
// whole number (1.0, 1e0: a client that keeps numbers as doubles; JSON Schema's "integer",
// which the published schema says, accepts them) are that number, as a ticket's token and
// seq are (TestTicketNumbersInAnySpelling). encoding/json refused them after the schema had
// passed them, and the prepare was refused invalid_request, naming a Go struct field. A number
// that is not a whole number in range is still refused, and nothing is claimed.
func TestReadSetAndClockNumbersInAnySpelling(t *testing.T) {
	t.Parallel()
	c := startStdio(t, sqliteEngine(t), serve.Options{})

	// Take seq 1 of domain acct.
	raw, isErr, rpcErr := serveCall(t, c, 1, serve.ToolPrepare, `{"intent":"pay:first","tool":"pay","args":{"amount":5},"domain":"acct"}`)
	var p serve.PrepareResult
	if isErr || rpcErr != "" || json.Unmarshal(raw, &p) != nil || p.Ticket == nil || p.Ticket.Seq != 1 {
		t.Fatalf("prepare: %s %s", raw, rpcErr)
	}
	ticket, _ := json.Marshal(p.Ticket)
	if _, isErr, rpcErr := serveCall(t, c, 2, serve.ToolCommit, `{"ticket":`+string(ticket)+`,"result":{"ok":true}}`); isErr || rpcErr != "" {
		t.Fatalf("commit: %s", rpcErr)
	}

	prepare := func(id int, intent, readSeq, counter string) (json.RawMessage, bool, string) {
		return serveCall(t, c, id, serve.ToolPrepare, `{"intent":"`+intent+`","tool":"pay","args":{"amount":6},"domain":"acct","read_set":[{"domain":"acct","seq":`+readSeq+`}],"agent":"a","vector_clock":{"a":`+counter+`}}`)
	}
	for i, bad := range [][2]string{{"1.5", "1"}, {"-1", "1"}, {"18446744073709551616", "1"}, {"1e999999999", "1"}, {"1", "2.5"}, {"1", "1e999999999"}} {
		raw, isErr, rpcErr := prepare(10+i, "pay:bad", bad[0], bad[1])
		var ref serve.Refusal
		if rpcErr == "" && (!isErr || json.Unmarshal(raw, &ref) != nil || ref.Code != fence.CodeInvalid) {
			t.Fatalf("read seq %s, counter %s: %s; want invalid_request", bad[0], bad[1], raw)
		}
	}
	// The read seq is read by value: 0.0 is stale.
	raw, isErr, rpcErr = prepare(20, "pay:stale", "0.0", "1")
	var ref serve.Refusal
	if rpcErr != "" || !isErr || json.Unmarshal(raw, &ref) != nil || ref.Code != fence.CodeStale {
		t.Fatalf("read seq 0.0: %s %s; want stale_read_set", raw, rpcErr)
	}
	raw, isErr, rpcErr = prepare(21, "pay:second", "1.0", "10e-1")
	if isErr || rpcErr != "" || json.Unmarshal(raw, &p) != nil || p.Status != serve.StatusFresh || p.Ticket == nil || p.Ticket.Seq != 2 {
		t.Fatalf("read seq 1.0, counter 10e-1: %s %s; want fresh with seq 2", raw, rpcErr)
	}
	ticket, _ = json.Marshal(p.Ticket)
	raw, isErr, rpcErr = serveCall(t, c, 22, serve.ToolCommit, `{"ticket":`+string(ticket)+`,"result":{"ok":true}}`)
	var cr serve.CommitResult
	if isErr || rpcErr != "" || json.Unmarshal(raw, &cr) != nil || cr.Cert == nil || cr.Cert.Clock["a"] != 2 {
		t.Fatalf("commit: %s %s; want a cert whose clock ticked a to 2", raw, rpcErr)
	}
}
