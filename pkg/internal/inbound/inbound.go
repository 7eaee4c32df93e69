// Package inbound keeps the requests a server sent its client that are being answered, so the
// server's notifications/cancelled can end the one it names. mcpstdio and httpback share it.
package inbound

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// Max bounds the requests being answered at once; beyond it Begin refuses.
const Max = 1024

// Table is the requests being answered, by the server's id. The zero Table is ready.
//
// A server may send a request under the id of one still being answered: legally once it has
// the first one's answer (our cleanup may not have run yet), or against JSON-RPC while the
// first still runs. Either way the later request holds the id, and each request removes only
// its own entry, so the first one's end leaves the second cancellable.
type Table struct {
	mu   sync.Mutex
	byID map[string]*entry
	n    int // requests being answered; a reused id counts each of its requests
}

type entry struct{ cancel context.CancelCauseFunc }

// Begin registers a request under id with the function that cancels it. It returns the
// function to call once the request is answered, or false (and registers nothing) when Max
// requests are being answered already.
func (t *Table) Begin(id json.RawMessage, cancel context.CancelCauseFunc) (end func(), ok bool) {
	key := jsonrpc.IDKey(id) // a cancellation names the id by its value, in any spelling
	e := &entry{cancel}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n >= Max {
		return nil, false
	}
	if t.byID == nil {
		t.byID = map[string]*entry{}
	}
	t.n++
	t.byID[key] = e
	return func() {
		t.mu.Lock()
		t.n--
		if t.byID[key] == e {
			delete(t.byID, key)
		}
		t.mu.Unlock()
	}, true
}

// Cancel finds the request that params (of notifications/cancelled) names and ends its
// context with cause(the notification's reason), reporting whether one was being answered
// under that id.
func (t *Table) Cancel(params json.RawMessage, cause func(reason string) error) bool {
	// Named as MCP's SDKs name it: by "requestId" spelled so (jsonrpc.Cancelled). A reason
	// that is not a string makes the notification one they refuse: it cancels nothing.
	requestID, reason, ok := jsonrpc.Cancelled(params)
	if !ok {
		return false
	}
	t.mu.Lock()
	e := t.byID[jsonrpc.IDKey(requestID)]
	t.mu.Unlock()
	if e == nil {
		return false
	}
	e.cancel(cause(reason))
	return true
}

// Len is how many ids have a request being answered.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}
