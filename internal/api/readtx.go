package api

import (
	"context"
	"sync"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// ReadBeginner is a store that begins read-only transactions: Postgres's
// READ ONLY, SQLite's query_only on its one connection. A read tool's
// transaction uses it when the gate's store has it, else a plain Begin.
type ReadBeginner interface {
	BeginRead(ctx context.Context) (core.Tx, error)
}

// readTx is the transaction a read tool's Handle gets: begun when first
// used, so that a read which does not touch it (get_operation) costs no
// round trip and, on SQLite, does not hold the one connection while it
// reads through the pool; rolled back by end.
type readTx struct {
	store core.Store
	mu    sync.Mutex
	gtx   core.Tx
	tx    toolspec.Tx
	err   error
}

// begin begins the transaction once; later calls return the first result.
func (r *readTx) begin(ctx context.Context) (toolspec.Tx, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tx != nil || r.err != nil {
		return r.tx, r.err
	}
	if rb, ok := r.store.(ReadBeginner); ok {
		r.gtx, r.err = rb.BeginRead(ctx)
	} else {
		r.gtx, r.err = r.store.Begin(ctx)
	}
	if r.err != nil {
		return nil, r.err
	}
	r.tx, r.err = toolspec.WrapTx(r.gtx)
	return r.tx, r.err
}

// end rolls the transaction back, if it began.
func (r *readTx) end(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gtx != nil {
		_ = r.gtx.Rollback(context.WithoutCancel(ctx))
	}
}

// Exec implements toolspec.Tx.
func (r *readTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tx, err := r.begin(ctx)
	if err != nil {
		return 0, err
	}
	return tx.Exec(ctx, query, args...)
}

// QueryRow implements toolspec.Tx.
func (r *readTx) QueryRow(ctx context.Context, query string, args ...any) toolspec.Row {
	tx, err := r.begin(ctx)
	if err != nil {
		return errRow{err}
	}
	return tx.QueryRow(ctx, query, args...)
}

// Query implements toolspec.Tx.
func (r *readTx) Query(ctx context.Context, query string, args ...any) (toolspec.Rows, error) {
	tx, err := r.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Query(ctx, query, args...)
}

// EngineTx is gate.EngineTx's way in: the engine's transaction, begun now;
// nil when it cannot begin (EngineTx then reports false).
func (r *readTx) EngineTx() any {
	tx, err := r.begin(context.Background())
	if err != nil {
		return nil
	}
	if e, ok := tx.(interface{ EngineTx() any }); ok {
		return e.EngineTx()
	}
	return nil
}

// Engine implements toolspec.Tx.
func (r *readTx) Engine() string {
	tx, err := r.begin(context.Background())
	if err != nil {
		return ""
	}
	return tx.Engine()
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }
