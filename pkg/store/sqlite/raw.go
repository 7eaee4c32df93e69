package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"time"
)

// Transactions run on the driver connection itself ((*sql.Conn).Raw), with statements the
// driver prepared once per connection, BEGIN, COMMIT and ROLLBACK included. Through
// database/sql every transaction would start a goroutine that watches its context, and the
// driver, seeing that context, one more per statement. The writer's transactions belong to
// the store, not to a caller (see tryBatch), so they watch no context at all; a View's
// statements watch its caller's context, as before. Rows are scanned without reflection.

// rawRunner runs statements on a driver connection. It is used only inside a
// (*sql.Conn).Raw callback of the connection its statements were prepared on.
type rawRunner struct {
	ctx   context.Context // the writer's: context.Background(); a reader's: View's
	c     driver.Conn
	stmts map[string]driver.Stmt
}

// stmt returns the prepared statement for q, or prepares one that the caller must close.
func (r *rawRunner) stmt(q string) (st driver.Stmt, temp bool, err error) {
	if st := r.stmts[q]; st != nil {
		return st, false, nil
	}
	st, err = r.c.(driver.ConnPrepareContext).PrepareContext(r.ctx, q)
	return st, true, err
}

func (r *rawRunner) exec(q string, args ...any) (int64, error) {
	st, temp, err := r.stmt(q)
	if err != nil {
		return 0, err
	}
	if temp {
		defer st.Close()
	}
	nv, err := namedValues(args)
	if err != nil {
		return 0, err
	}
	res, err := st.(driver.StmtExecContext).ExecContext(r.ctx, nv)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r *rawRunner) query(q string, args ...any) (rowIter, error) {
	st, temp, err := r.stmt(q)
	if err != nil {
		return nil, err
	}
	nv, err := namedValues(args)
	if err == nil {
		var rows driver.Rows
		rows, err = st.(driver.StmtQueryContext).QueryContext(r.ctx, nv)
		if err == nil {
			it := &rawRows{rows: rows, vals: make([]driver.Value, len(rows.Columns()))}
			if temp {
				it.stmt = st
			}
			return it, nil
		}
	}
	if temp {
		st.Close()
	}
	return nil, err
}

// namedValues converts arguments as database/sql does for a driver without its own converter.
func namedValues(args []any) ([]driver.NamedValue, error) {
	if len(args) == 0 {
		return nil, nil
	}
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		var v driver.Value
		switch a := a.(type) {
		case nil, int64, float64, bool, []byte, string, time.Time:
			v = a
		case int:
			v = int64(a)
		default:
			var err error
			if v, err = driver.DefaultParameterConverter.ConvertValue(a); err != nil {
				return nil, fmt.Errorf("sqlite ledger: argument %d: %w", i+1, err)
			}
		}
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv, nil
}

// rawRows iterates over a driver.Rows like *sql.Rows, scanning into the few kinds of
// destination the ledger's queries use.
type rawRows struct {
	rows   driver.Rows
	stmt   driver.Stmt // closed with the rows when it was prepared for them alone
	vals   []driver.Value
	err    error
	closed bool
}

func (r *rawRows) Next() bool {
	if r.closed || r.err != nil {
		return false
	}
	if err := r.rows.Next(r.vals); err != nil {
		if err != io.EOF {
			r.err = err
		}
		return false
	}
	return true
}

func (r *rawRows) Err() error { return r.err }

func (r *rawRows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.rows.Close()
	if r.stmt != nil {
		if serr := r.stmt.Close(); err == nil {
			err = serr
		}
	}
	return err
}

// Scan copies the current row into dest (*string, *[]byte, *int64, *int or *any). The driver hands
// out a fresh slice for every blob, so a *[]byte keeps it without copying.
func (r *rawRows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sqlite ledger: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, d := range dest {
		v := r.vals[i]
		ok := false
		switch d := d.(type) {
		case *string:
			switch v := v.(type) {
			case string:
				*d, ok = v, true
			case []byte:
				*d, ok = string(v), true
			}
		case *[]byte:
			switch v := v.(type) {
			case []byte:
				*d, ok = v, true
			case string:
				*d, ok = []byte(v), true
			case nil:
				*d, ok = nil, true
			}
		case *any:
			*d, ok = v, true
		case *int64:
			if v, isInt := v.(int64); isInt {
				*d, ok = v, true
			}
		case *int:
			if v, isInt := v.(int64); isInt && int64(int(v)) == v {
				*d, ok = int(v), true
			}
		}
		if !ok {
			return fmt.Errorf("sqlite ledger: cannot scan column %d (%T) into %T", i, v, d)
		}
	}
	return nil
}
