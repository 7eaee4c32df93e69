package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// landedStallStore stands for a disk that took a write and does not answer its sync: with
// stall set, the next Update is applied and then waits for gate before it returns, whatever
// its context (a SQLite commit whose fsync hangs on a frozen or failing disk). With drop, the
// Update's function runs, is rolled back, and the Update then waits and fails (a write the
// disk never took, as when the process ends before its commit reached the file).
type landedStallStore struct {
	*fence.MemoryStore
	drop    bool
	stall   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

var errDropped = errors.New("the write never reached the disk")

func newLandedStallStore() *landedStallStore {
	return &landedStallStore{MemoryStore: fence.NewMemoryStore(), entered: make(chan struct{}), gate: make(chan struct{})}
}

func (s *landedStallStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	stall := s.stall.CompareAndSwap(true, false)
	if stall && s.drop {
		_ = s.MemoryStore.Update(ctx, func(tx fence.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			return errDropped
		})
		close(s.entered)
		<-s.gate
		return errDropped
	}
	err := s.MemoryStore.Update(ctx, fn)
	if stall {
		close(s.entered)
		<-s.gate
	}
	return err
}

// open lets the stalled Update return.
func (s *landedStallStore) open() { s.once.Do(func() { close(s.gate) }) }

// Close leaves the memory store open: a second engine (the next process) reads it.
func (s *landedStallStore) Close() error { return nil }

// goneOnce is a Liveness that says every owner runs, but owner once gone is set.
func goneOnce(owner string, gone *atomic.Bool) func(string) fence.Liveness {
	return func(o string) fence.Liveness {
		if o == owner && gone.Load() {
			return fence.Dead
		}
		return fence.Alive
	}
}

// givenUp runs PrepareWaitBeside on a request whose claim's Update stalls once it landed, and
// checks it is answered ErrClaimStuck.
func givenUp(t *testing.T, e *fence.Engine, s *landedStallStore, req fence.Request) {
	t.Helper()
	s.stall.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	adm, _, err := e.PrepareWaitBeside(ctx, req, 0, nil, 100*time.Millisecond, "given up: never sent")
	if !errors.Is(err, fence.ErrClaimStuck) || adm.Ticket != nil {
		t.Fatalf("a claim whose write does not return: %+v, %v; want ErrClaimStuck and no ticket", adm, err)
	}
	<-s.entered
}

// TestRetryMeetingAClaimGivenUpRunsIt: a claim PrepareWaitBeside gave up (its call answered
// NOT run) that landed while its write had not returned is met by the agent's retry: the
// retry is admitted, the claim released as never sent, where it was refused in flight (and,
// its lease lapsed, prior_failure: the call may have run) before 2026-12-06. The claim's
// write returning later changes nothing.
func TestRetryMeetingAClaimGivenUpRunsIt(t *testing.T) {
	s := newLandedStallStore()
	defer s.open()
	e := fence.New(s, fence.Config{LeaseTTL: time.Minute})
	defer e.Close()
	req := fence.Request{Intent: "charge", Tool: "charge", Args: []byte(`{"n":1}`)}
	givenUp(t, e, s, req)

	adm, err := e.Prepare(context.Background(), req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("the retry meeting the claim given up: %+v, %v; want it admitted", adm, err)
	}
	rec, rel := recordOf(t, s.MemoryStore, req.Intent)
	if len(rel) != 1 || !strings.Contains(rel[0].Reason, "never sent") {
		t.Fatalf("releases after the retry: %+v; want the claim given up released, saying why", rel)
	}
	if rec == nil || rec.Nonce != adm.Ticket.Nonce {
		t.Fatalf("the intent's record after the retry: %+v; want the retry's claim", rec)
	}

	s.open() // the write of the claim given up returns
	time.Sleep(300 * time.Millisecond)
	if rec2, rel2 := recordOf(t, s.MemoryStore, req.Intent); rec2 == nil || rec2.Nonce != adm.Ticket.Nonce || rec2.State != fence.StateInFlight || len(rel2) != 1 {
		t.Fatalf("after the write given up returned: %+v, releases %+v; want the retry's claim standing", rec2, rel2)
	}
	if _, err := e.Commit(context.Background(), *adm.Ticket, []byte(`"charged"`)); err != nil {
		t.Fatalf("the retry's commit: %v", err)
	}
}

// TestClaimGivenUpIsReleasedByTheNextProcess: the process whose claim was given up stops
// before the claim's write returns, the claim in the ledger: the note it left in the spool
// has the next process sharing the spool release it once the first is gone, and the retry
// runs. Before 2026-12-06 the release lived in the first process's memory: the next one
// found the claim's holder gone and made it unknown, and the retry was refused until an
// operator cleared it.
func TestClaimGivenUpIsReleasedByTheNextProcess(t *testing.T) {
	s := newLandedStallStore()
	defer s.open()
	spool := t.TempDir()
	var firstGone atomic.Bool
	live := goneOnce("first", &firstGone)
	first := fence.New(s, fence.Config{LeaseTTL: time.Minute, Owner: "first", Liveness: live, SpoolDir: spool})
	req := fence.Request{Intent: "charge", Tool: "charge", Args: []byte(`{"n":1}`)}
	givenUp(t, first, s, req)
	// In the spool as the call is answered: a process stopped at once leaves it.
	notes, _ := fence.SpoolFiles(spool)
	if len(notes) != 1 {
		t.Fatalf("the spool as the call given up is answered: %v; want its note", notes)
	}
	t.Logf("the spool: %v", notes)

	firstGone.Store(true) // stopped, its claim's write never answered
	next := fence.New(s, fence.Config{LeaseTTL: time.Minute, Owner: "next", Liveness: live, SpoolDir: spool})
	defer next.Close()
	if _, err := next.Recover(context.Background()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	if left, _ := fence.SpoolFiles(spool); len(left) != 0 {
		t.Errorf("the spool after the next process's recover: %v; want the note gone", left)
	}
	_, rel := recordOf(t, s.MemoryStore, req.Intent)
	if len(rel) != 1 || !strings.Contains(rel[0].Reason, "never sent") {
		t.Fatalf("releases: %+v; want the claim given up released, saying why", rel)
	}
	adm, err := next.Prepare(context.Background(), req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("the retry through the next process: %+v, %v; want it admitted", adm, err)
	}
}

// TestNoteOfAClaimThatDidNotLandWaitsForItsWriter: the note of a claim given up whose write the
// disk has not taken waits in the spool while the process that wrote it runs (its write may
// still land, and that process releases it then), and is dropped once that process is gone,
// nothing released.
func TestNoteOfAClaimThatDidNotLandWaitsForItsWriter(t *testing.T) {
	s := newLandedStallStore()
	s.drop = true
	defer s.open()
	spool := t.TempDir()
	var firstGone atomic.Bool
	live := goneOnce("first", &firstGone)
	first := fence.New(s, fence.Config{Owner: "first", Liveness: live, SpoolDir: spool})
	req := fence.Request{Intent: "charge", Tool: "charge", Args: []byte(`{"n":1}`)}
	givenUp(t, first, s, req)
	if notes, _ := fence.SpoolFiles(spool); len(notes) != 1 {
		t.Fatalf("the spool as the call given up is answered: %v; want its note", notes)
	}
	next := fence.New(s, fence.Config{Owner: "next", Liveness: live, SpoolDir: spool})
	defer next.Close()
	if _, err := next.DrainSpool(context.Background()); err != nil {
		t.Fatalf("drain with the note's writer running: %v", err)
	}
	if notes, _ := fence.SpoolFiles(spool); len(notes) != 1 {
		t.Fatalf("the spool after a drain with the note's writer running: %v; want the note kept", notes)
	}
	firstGone.Store(true)
	if _, err := next.DrainSpool(context.Background()); err != nil {
		t.Fatalf("drain with the note's writer gone: %v", err)
	}
	if notes, _ := fence.SpoolFiles(spool); len(notes) != 0 {
		t.Fatalf("the spool after a drain with the note's writer gone: %v; want it empty", notes)
	}
	if rec, rel := recordOf(t, s.MemoryStore, req.Intent); rec != nil || len(rel) != 0 {
		t.Fatalf("record %+v, releases %+v: want none (the claim never landed)", rec, rel)
	}
}
