package fence_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// countingStore counts the store's transactions.
type countingStore struct {
	fence.Store
	n atomic.Int64
}

func (s *countingStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	s.n.Add(1)
	return s.Store.View(ctx, fn)
}

func (s *countingStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	s.n.Add(1)
	return s.Store.Update(ctx, fn)
}

// A wait whose Waited polls every hour (PollEvery) reads the store once before it waits, not
// every 2 to 100 ms, and is still woken at once by the outcome this engine records: it
// receives the cert. Without PollEvery the wait read the store about ten times a second.
func TestWaitedPollEveryReadsRarelyAndWakesOnTheOutcome(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: fence.NewMemoryStore()}
	e := fence.New(st, fence.Config{})
	defer e.Close()
	req := fence.Request{Intent: "x", Tool: "t"}
	first, err := e.Prepare(ctx, req)
	if err != nil || !first.Fresh() {
		t.Fatalf("prepare: %+v %v", first, err)
	}
	var w fence.Waited
	w.PollEvery(time.Hour)
	before := st.n.Load()
	type got struct {
		adm fence.Admission
		err error
	}
	done := make(chan got, 1)
	go func() {
		adm, _, err := e.PrepareWaitWith(ctx, req, time.Hour, nil, &w)
		done <- got{adm, err}
	}()
	// The wait's first read, then nothing for as long as it waits: 300 ms is three polls of
	// 100 ms, the ceiling of a wait without PollEvery.
	for st.n.Load() == before {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if n := st.n.Load() - before; n != 1 {
		t.Fatalf("the wait read the store %d times in 300 ms, want once", n)
	}
	if _, err := e.Commit(ctx, *first.Ticket, []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-done:
		if g.err != nil || g.adm.Cert == nil {
			t.Fatalf("the wait after the outcome: %+v %v", g.adm, g.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the outcome this engine recorded did not wake the wait")
	}
	if w.Since() != first.Ticket.Token {
		t.Fatalf("Since %d, want the first claim's token %d", w.Since(), first.Ticket.Token)
	}
}
