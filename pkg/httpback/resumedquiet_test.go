package httpback

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// Found 2026-12-07 (TestTaskResultAskedAgainAfterACut failed under load): the TypeScript SDK's
// server can lose the response on a resumption. A response stored in its event store after
// the resumption replayed the stored events, and before it registered the new stream, is
// written to no stream; the resumed stream then stays open for ever, with keep-alive
// comments and no event. This server does that on the first resumption (its first GET with
// Last-Event-ID keeps the stream open, sending comments only), and replays the response on the
// second. The call gets its result, POSTed once. Before, it waited on the silent stream until
// its context ended: a call that ran was left unknown, or a task's result never recorded.
func TestResumedStreamThatStaysSilentIsResumedAgain(t *testing.T) {
	// Not parallel: it sets resumedQuiet, which every Session reads.
	defer func(d time.Duration) { resumedQuiet = d }(resumedQuiet)
	resumedQuiet = 700 * time.Millisecond
	for _, silent := range []int{1, 2} {
		f, srv := newFake(t)
		gets := f.resumedAfterE1(func(n int32, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			if int(n) <= silent {
				// Registered nowhere: kept alive, and nothing else.
				for {
					if _, err := w.Write([]byte(": keepalive\n\n")); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
			writeEvent(w, "e2", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[],"ok":true}`)))
		})
		s := session(t, upstream(t, srv.URL, Config{}))
		res, err := callWithin(t, s, "%d silent resumptions: the call waited on", silent)
		if err != nil || string(res) != `{"content":[],"ok":true}` {
			t.Fatalf("%d silent resumptions: result %s, %v; want the result the next one brings", silent, res, err)
		}
		if n := f.count("tools/call"); n != 1 {
			t.Fatalf("%d silent resumptions: %d POSTs of the call, want 1", silent, n)
		}
		if n := gets.Load(); n != int32(silent)+1 {
			t.Fatalf("%d silent resumptions: %d resuming GETs, want %d", silent, n, silent+1)
		}
	}
}

// TestQuietResumptionRefusedWhileTheServerHoldsTheOldStream: a resumed stream closed because
// it stayed quiet may still be the server's, fed, when what stands between (a proxy that does
// not pass the client's abort on) keeps it open: the TypeScript SDK then answers 409 to every
// resumption until the call's response closes the old stream, and replays the response after.
// Seen against the SDK 1.32.2 with an event store that names an event's stream, a tool that
// slept 10 s after a cut, resumedQuiet 2 s: the call failed after 7 s ("resuming it failed:
// HTTP 409"), a call that ran left unknown, where without the watch it got its result. A
// resumption after a quiet spell is asked again, a resumedQuiet apart, while the call waits.
func TestQuietResumptionRefusedWhileTheServerHoldsTheOldStream(t *testing.T) {
	// Not parallel: it sets resumedQuiet, which every Session reads.
	defer func(d time.Duration) { resumedQuiet = d }(resumedQuiet)
	resumedQuiet = 100 * time.Millisecond
	const refused = resumeTries + 2
	f, srv := newFake(t)
	gets := f.resumedAfterE1(func(n int32, w http.ResponseWriter, r *http.Request) {
		switch {
		case n == 1: // the first resumption: quiet
			holdQuiet(w, r)
		case n <= 1+refused:
			http.Error(w, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Conflict: Stream already has an active connection"},"id":null}`, http.StatusConflict)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "e2", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[],"ok":true}`)))
		}
	})
	s := session(t, upstream(t, srv.URL, Config{}))
	res, err := callWithin(t, s, "the call waited on")
	if err != nil || string(res) != `{"content":[],"ok":true}` {
		t.Fatalf("result %s, %v (GETs %d); want the result the resumption after the refusals brings", res, err, gets.Load())
	}
	if n := f.count("tools/call"); n != 1 {
		t.Fatalf("%d POSTs of the call, want 1", n)
	}
}

// TestQuietResumptionOfAGoneServerEnds: a resumed stream closed for its quiet spell, and the
// server then gone behind its proxy (every GET answered 502). Only a 409 (the server, alive,
// holding the stream) is asked again for as long as the call waits; this is given quietRounds
// rounds, and the call ends as a cut stream does: it may have run. Before (found in the final
// read, 2026-12-07), it was asked again every resumedQuiet for as long as the call waited,
// which for a fenced call is for ever: its claim held, duplicates told it still runs.
func TestQuietResumptionOfAGoneServerEnds(t *testing.T) {
	// Not parallel: it sets resumedQuiet, which every Session reads.
	defer func(d time.Duration) { resumedQuiet = d }(resumedQuiet)
	resumedQuiet = 100 * time.Millisecond
	f, srv := newFake(t)
	gets := f.resumedAfterE1(func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 { // the first resumption: quiet
			holdQuiet(w, r)
			return
		}
		http.Error(w, "bad gateway", http.StatusBadGateway)
	})
	s := session(t, upstream(t, srv.URL, Config{}))
	res, err := callWithin(t, s, "the call kept asking a gone server")
	if err == nil {
		t.Fatalf("result %s; want the call to fail as a cut stream does", res)
	}
	mayHaveRun(t, err)
	if n, want := gets.Load(), int32(1+quietRounds*resumeTries); n != want {
		t.Fatalf("%d resuming GETs, want %d (the quiet one, then %d rounds of %d)", n, want, quietRounds, resumeTries)
	}
	if n := f.count("tools/call"); n != 1 {
		t.Fatalf("%d POSTs of the call, want 1", n)
	}
}
