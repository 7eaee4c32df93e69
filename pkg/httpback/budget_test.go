package httpback

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// TestAnswersShareTheBudget: large answers read at once share the process's budget (here 4
// MiB, each answer of unknown length reserving the 2 MiB a message may have). Six answers of
// 1.5 MiB at once all arrive, never more than the budget taken; a call under HoldAnswers keeps
// its answer's share until done; and while two answers that stall half way hold the whole
// budget, a third large answer waits budgetWait and is then given up as too large: the call
// may have run (unknown to the core), never "not sent". Every byte goes back afterwards.
func TestAnswersShareTheBudget(t *testing.T) {
	oldBudget, oldMax, oldWait := answers, maxMessage, budgetWait
	answers, maxMessage = budget.NewPool(4<<20), 2<<20
	t.Cleanup(func() { answers, maxMessage, budgetWait = oldBudget, oldMax, oldWait })

	text := bytes.Repeat([]byte("x"), 3<<19)
	stall := make(chan struct{})
	var stalled sync.WaitGroup
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		var p struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(m.Params, &p)
		w.Header().Set("Content-Type", "application/json")
		whole := jsonrpc.Response(m.ID, json.RawMessage(`{"t":"`+string(text)+`"}`))
		if p.Name != "stall" {
			w.Write(whole)
			return
		}
		w.Write(whole[:len(whole)-100])
		w.(http.Flusher).Flush()
		stalled.Done()
		<-stall
		w.Write(whole[len(whole)-100:])
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	call := func(ctx context.Context, name string) error {
		res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"`+name+`"}`))
		if err == nil && len(res) < len(text) {
			t.Errorf("%s: a result of %d bytes", name, len(res))
		}
		return err
	}

	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := call(context.Background(), "big"); err != nil {
				t.Errorf("one of six large answers at once: %v", err)
			}
		}()
	}
	wg.Wait()
	if now, most := answers.Used(); now != 0 || most > 4<<20 || most < 2<<20 {
		t.Fatalf("after six answers: %d bytes of the budget taken, at most %d; want 0, and between one reservation and the budget", now, most)
	}

	ctx, done := HoldAnswers(context.Background())
	if err := call(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if now, _ := answers.Used(); now < int64(len(text)) || now > 2<<20 {
		t.Fatalf("a held answer of %d bytes keeps %d bytes of the budget", len(text), now)
	}
	done()
	if now, _ := answers.Used(); now != 0 {
		t.Fatalf("%d bytes of the budget still taken after the hold was done", now)
	}

	stalled.Add(2)
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- call(context.Background(), "stall") }()
	}
	stalled.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for now, _ := answers.Used(); now < 4<<20; now, _ = answers.Used() {
		if time.Now().After(deadline) {
			t.Fatalf("the two stalled answers hold %d bytes of the budget, want all of it", now)
		}
		time.Sleep(time.Millisecond)
	}
	budgetWait = 300 * time.Millisecond
	start := time.Now()
	err := call(context.Background(), "big")
	mayHaveRun(t, err)
	if !errors.Is(err, ErrTooLarge) || time.Since(start) < budgetWait {
		t.Fatalf("a large answer while the budget was full: %v after %s; want ErrTooLarge after %s", err, time.Since(start), budgetWait)
	}
	close(stall)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a stalled answer, once it went on: %v", err)
		}
	}
	if now, most := answers.Used(); now != 0 || most > 4<<20 {
		t.Fatalf("at the end: %d bytes of the budget taken, at most %d", now, most)
	}
}

// A stream's messages each count on their own: a GET stream that carries 3 MiB of small
// notifications, and stays open, holds none of the budget once they are delivered (before
// each message gave its share back, the stream would keep a reservation for as long as it
// stayed open, after its first MiB).
func TestStreamGivesTheBudgetBackPerMessage(t *testing.T) {
	oldBudget, oldMax := answers, maxMessage
	answers, maxMessage = budget.NewPool(4<<20), 2<<20
	t.Cleanup(func() { answers, maxMessage = oldBudget, oldMax })
	const notes = 3000
	f, srv := newFake(t)
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		pad := strings.Repeat("p", 1<<10)
		for i := range notes {
			fmt.Fprintf(w, "data: %s\n\n", jsonrpc.Notification("notifications/message", json.RawMessage(fmt.Sprintf(`{"level":"info","data":"%d %s"}`, i, pad))))
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	var got atomic.Int64
	u := upstream(t, srv.URL, Config{OnNotification: func(string, json.RawMessage) { got.Add(1) }})
	session(t, u)
	deadline := time.Now().Add(30 * time.Second)
	for got.Load() < notes {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d notifications delivered", got.Load(), notes)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the reader is back waiting for the next event
	if now, _ := answers.Used(); now != 0 {
		t.Fatalf("an open stream whose %d notifications were delivered holds %d bytes of the budget", notes, now)
	}
}
