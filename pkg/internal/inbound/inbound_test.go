package inbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// Each request under a reused id counts towards Max, and the id stays cancellable until the
// last request registered under it ends, whichever order they end in.
func TestReusedIDsCountAndStayCancellable(t *testing.T) {
	var tab Table
	var ends []func()
	ctxs := make([]context.Context, 3)
	for i := range 3 {
		ctx, cancel := context.WithCancelCause(context.Background())
		ctxs[i] = ctx
		end, ok := tab.Begin(json.RawMessage(`7`), cancel)
		if !ok {
			t.Fatal("refused below Max")
		}
		ends = append(ends, end)
	}
	if tab.n != 3 || tab.Len() != 1 {
		t.Fatalf("%d counted under %d ids, want 3 under 1", tab.n, tab.Len())
	}
	ends[0]()
	ends[1]()
	why := errors.New("gone")
	if !tab.Cancel(json.RawMessage(`{"requestId":7}`), func(string) error { return why }) {
		t.Fatal("the id's last request was not found once the earlier ones ended")
	}
	if context.Cause(ctxs[2]) != why || ctxs[0].Err() != nil {
		t.Fatalf("cancelled the wrong request: %v, %v", context.Cause(ctxs[2]), ctxs[0].Err())
	}
	ends[2]()
	if tab.n != 0 || tab.Len() != 0 || tab.Cancel(json.RawMessage(`{"requestId":7}`), func(string) error { return why }) {
		t.Fatalf("%d counted under %d ids after every request ended", tab.n, tab.Len())
	}
}

func TestBeginRefusesBeyondMax(t *testing.T) {
	var tab Table
	for i := range Max {
		if _, ok := tab.Begin(json.RawMessage(fmt.Sprint(i)), func(error) {}); !ok {
			t.Fatalf("refused the %dth request", i+1)
		}
	}
	if _, ok := tab.Begin(json.RawMessage(`"one more"`), func(error) {}); ok {
		t.Fatal("took a request beyond Max")
	}
	for _, bad := range []string{`{}`, `not json`, `{"requestId":null}`, `{"requestId":"absent"}`} {
		if tab.Cancel(json.RawMessage(bad), func(string) error { return nil }) {
			t.Fatalf("%s named a request", bad)
		}
	}
}

// A server's cancellation names its request by the id's value, in any spelling.
func TestCancelNamesTheIDByValue(t *testing.T) {
	var tab Table
	for id, as := range map[string]string{`"q"`: `"\u0071"`, `5`: `5.0`, `"x\udbff"`: `"x\uDBFF"`} {
		ctx, cancel := context.WithCancelCause(context.Background())
		end, ok := tab.Begin(json.RawMessage(id), cancel)
		if !ok {
			t.Fatal("refused below Max")
		}
		if tab.Cancel(json.RawMessage(`{"requestId":"5"}`), func(string) error { return nil }) && id == `5` {
			t.Fatal(`a cancellation of "5" found request 5`)
		}
		if !tab.Cancel(json.RawMessage(`{"requestId":`+as+`}`), func(string) error { return errors.New("x") }) || ctx.Err() == nil {
			t.Errorf("request %s was not cancelled by a cancellation naming %s", id, as)
		}
		end()
	}
}

// A server's cancellation names its request by "requestId" spelled so (escapes decoded), as
// MCP's SDKs read it: "RequestId" names nothing, also when it comes after "requestId", and a
// reason that is not a string makes a notification they refuse. Before, the params were read
// with encoding/json, which took "RequestId" for "requestId" and kept the last: the server's
// cancellation of request 5 cancelled request 7, whose answer the server then never got.
func TestCancelNamesTheRequestAsMCPsSDKsDo(t *testing.T) {
	t.Parallel()
	var tab Table
	ctxs := map[string]context.Context{}
	for _, id := range []string{"5", "7"} {
		ctx, cancel := context.WithCancelCause(context.Background())
		end, ok := tab.Begin(json.RawMessage(id), cancel)
		if !ok {
			t.Fatal("refused below Max")
		}
		defer end()
		ctxs[id] = ctx
	}
	cause := func(string) error { return errors.New("cancelled") }
	for _, none := range []string{`{"RequestId":7}`, `{"requestID":7}`, `{"requestId":7,"reason":3}`, `{"requestId":7,"reason":{"text":"x"}}`} {
		if tab.Cancel(json.RawMessage(none), cause) || ctxs["7"].Err() != nil {
			t.Fatalf("%s cancelled request 7", none)
		}
	}
	if !tab.Cancel(json.RawMessage(`{"requestId":5,"RequestId":7,"reason":"gone"}`), cause) || ctxs["5"].Err() == nil || ctxs["7"].Err() != nil {
		t.Fatalf(`{"requestId":5,"RequestId":7} cancelled 5: %v, 7: %v; want 5 only`, ctxs["5"].Err(), ctxs["7"].Err())
	}
	if !tab.Cancel(json.RawMessage(`{"requestI\u0064":7,"reason":null}`), cause) || ctxs["7"].Err() == nil {
		t.Fatal(`"requestI\u0064" did not name request 7`)
	}
}
