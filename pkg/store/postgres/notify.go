package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notifier is implemented by stores that can tell a waiter that an in-flight intent finished
// in any process sharing the ledger, so coalescing waiters need not poll. The engine's
// PrepareWait can use it in place of its polling back-off (see docs/DECISIONS-postgres.md).
type Notifier interface {
	// Watch returns a channel that is closed when an in-flight claim of intent ends (commit,
	// abort, release, clear, or the holder found dead), or when notifications may have been
	// missed (the listening connection was replaced): either way, ask the store again. Call
	// stop when done waiting. Watch before reading the intent's state, so an end that
	// happens in between is not missed.
	Watch(ctx context.Context, intent string) (ch <-chan struct{}, stop func(), err error)
}

var _ Notifier = (*Store)(nil)

// channel is the LISTEN/NOTIFY channel of this ledger's schema (named once the schema is
// resolved: every write that ends a claim names it).
func (s *Store) channel() string { return s.chanName }

// channelOf is the LISTEN/NOTIFY channel of a ledger in schema.
func channelOf(schema string) string {
	h := sha256.Sum256([]byte(schema))
	return "effectfence_" + hex.EncodeToString(h[:8])
}

// listener holds one dedicated connection that LISTENs on the ledger's channel, and the
// intents this store waits for. Each waited intent has a row in effectfence_waiters naming
// this listener while anyone here waits, so committers notify only intents someone waits for.
type listener struct {
	s      *Store
	id     string
	mu     sync.Mutex // guards m and the waiters rows of this listener
	m      map[string]*watch
	ready  chan struct{} // closed once the first LISTEN is in place (or failed: see err)
	err    error
	cancel context.CancelFunc
	done   chan struct{}
	pid    atomic.Uint32 // backend of the LISTEN connection (for tests)
}

type watch struct {
	ch chan struct{}
	n  int
}

// Watch implements Notifier. The first call starts the listener; if it cannot connect, Watch
// returns the error and the caller should fall back to polling.
func (s *Store) Watch(ctx context.Context, intent string) (<-chan struct{}, func(), error) {
	l, err := s.listen(ctx)
	if err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	x := l.m[intent]
	if x == nil {
		// Register under the intent's lock: a transaction ending the claim either sees this
		// row (and notifies) or committed before it (and the caller's next read sees that).
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("SELECT pg_advisory_xact_lock($1) WHERE true"+s.pinned, lockKey(s.schema, "intent", intent))
		b.Queue("INSERT INTO effectfence_waiters (intent, listener) VALUES ($1, $2) ON CONFLICT DO NOTHING", intent, l.id)
		b.Queue("COMMIT")
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return nil, nil, fmt.Errorf("postgres ledger: registering a waiter: %w", err)
		}
		s.at("waiters", 0)
		x = &watch{ch: make(chan struct{})}
		l.m[intent] = x
	}
	x.n++
	var once sync.Once
	return x.ch, func() { once.Do(func() { l.unwatch(intent, x) }) }, nil
}

func (l *listener) unwatch(intent string, x *watch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	x.n--
	if x.n > 0 {
		return
	}
	cur := l.m[intent]
	if cur != nil && cur != x {
		return // a newer watch of the intent still needs the row
	}
	delete(l.m, intent)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A row left behind only costs a committer a needless NOTIFY; rows older than an hour are
	// dropped when a listener starts.
	_, _ = l.s.pool.Exec(ctx, l.s.qual.Replace("DELETE FROM effectfence_waiters WHERE intent = $1 AND listener = $2"), intent, l.id)
	l.s.at("waiters", 0)
}

// wake closes the channel of intent (of every intent when all is set) and forgets it: its
// watchers' stop still removes the waiters row unless a newer watch of the intent needs it.
func (l *listener) wake(intent string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, x := range l.m {
		if all || k == intent {
			close(x.ch)
			delete(l.m, k)
		}
	}
}

func (s *Store) listen(ctx context.Context) (*listener, error) {
	s.listenOnce.Do(func() {
		lctx, cancel := context.WithCancel(context.Background())
		s.listener = &listener{s: s, id: s.instance, m: map[string]*watch{}, ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
		go s.listener.run(lctx)
	})
	l := s.listener
	if l == nil {
		return nil, fmt.Errorf("postgres ledger: the store is closed")
	}
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if l.err != nil {
		return nil, l.err
	}
	return l, nil
}

// run keeps a LISTEN connection open until the store closes, reconnecting with back-off.
// After a reconnect every waiter is woken, since notifications may have been missed.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	first := true
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := l.connect(ctx)
		reconnected := !first
		if first {
			l.err, first = err, false
			close(l.ready)
			if err != nil {
				return
			}
		}
		if err == nil {
			delay = 100 * time.Millisecond
			if reconnected {
				l.wake("", true)
			}
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				l.wake(n.Payload, false)
			}
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("postgres ledger: listening for outcomes: %w", err)
	}
	// Its own connection, not the pool's: pinned here (pathPin), and listening, in one
	// round trip: one simple query of two statements, which run in one implicit transaction,
	// so both take effect or neither (LISTEN takes effect at its commit). Until 2026-12-07 each
	// had a round trip of its own (TestListenerStartsInTwoRoundTrips).
	if _, err := conn.Exec(ctx, l.s.pin.statement+"; LISTEN "+pgx.Identifier{l.s.channel()}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("postgres ledger: listening for outcomes on the ledger's schema (%s): %w", l.s.pin.set, err)
	}
	_, _ = conn.Exec(ctx, l.s.qual.Replace("DELETE FROM effectfence_waiters WHERE created_at < now() - interval '1 hour'"))
	l.pid.Store(conn.PgConn().PID())
	return conn, nil
}

func (l *listener) close() {
	l.cancel()
	<-l.done
}
