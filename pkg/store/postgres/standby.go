package postgres

// COMMITs whose wait for a synchronous standby was ended.
//
// With a synchronous standby (synchronous_standby_names), a COMMIT flushes the transaction on
// the primary, marks it committed there, and then waits for the standby. That wait can be
// ended before the standby has the transaction: the backend is terminated
// (pg_terminate_backend; the connection closes), or the wait is cancelled (pg_cancel_backend,
// as an operator does to COMMITs hanging on a standby that is down, or the cancel request pgx
// sends when it closes a connection whose context ended; the COMMIT then succeeds, with a
// WARNING). PostgreSQL keeps such a transaction, committed on the primary alone: it reads as
// committed there (the COMMIT's answer, txid_status, the record), and a failover to the
// standby loses it. A claim answered so ran its call, and its retry after the failover ran
// it again (TestClaimWhoseStandbyWaitIsEndedIsNotAdmittedWithoutIt).
//
// So a commit the store learns of otherwise than by an untroubled COMMIT (one whose answer
// was lost, or that came with a warning) is answered only once confirm has committed a write
// of its own after it: WAL reaches a standby in order, so the standby then has the first one
// too.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
)

// errUnconfirmed: a commit the server has may not be on its synchronous standby, and the
// store could not confirm that it is (confirm).
var errUnconfirmed = errors.New("the server recorded it, but whether its synchronous standby has it could not be confirmed")

// warnings says whether the server sent a WARNING (a cancelled wait for the standby comes
// with one) on a connection while the store watched it: from reset to warned.
type warnings struct{ m sync.Map } // *pgconn.PgConn -> bool (a WARNING came)

func (w *warnings) notice(c *pgconn.PgConn, n *pgconn.Notice) {
	if n.SeverityUnlocalized != "WARNING" && n.Severity != "WARNING" {
		return
	}
	if _, watched := w.m.Load(c); watched {
		w.m.Store(c, true)
	}
}

// reset starts watching c; warned stops, and says whether a WARNING came on c meanwhile.
func (w *warnings) reset(c *pgconn.PgConn) { w.m.Store(c, false) }

func (w *warnings) warned(c *pgconn.PgConn) bool {
	v, ok := w.m.LoadAndDelete(c)
	return ok && v.(bool)
}

// confirm commits a write on another connection, durable as the store's writes are (see
// durable): with a synchronous standby, its COMMIT returns once the standby has everything
// the primary committed before it. An error says that could not be confirmed (errUnconfirmed).
func (s *Store) confirm(ctx context.Context) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnconfirmed, err)
	}
	defer pc.Release()
	c := pc.Conn()
	args, _ := counterArgs(s.shard(c.PgConn()), fence.Counters{})
	var b pgx.Batch
	b.Queue("SELECT 1 WHERE " + durable + s.pinned)
	b.Queue(addCounters, args...)
	s.warns.reset(c.PgConn())
	err = c.SendBatch(ctx, &b).Close()
	if warned := s.warns.warned(c.PgConn()); err == nil && warned {
		err = errors.New("its own wait for the standby was ended too")
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errUnconfirmed, err)
	}
	s.at("confirmed", 0)
	return nil
}
