package sqliteengine

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
)

// stmtCache holds a Store's prepared statements, one per query text.
// database/sql prepares each on every connection it runs on and, in a
// transaction (Tx.StmtContext), reuses the one already prepared on the
// transaction's connection.
type stmtCache struct {
	db *sql.DB
	// all is set once every query of allQueries is prepared; preparingAll
	// while one caller prepares them.
	all, preparingAll atomic.Bool

	mu sync.Mutex
	m  map[string]*sql.Stmt
	// inFlight holds the queries being prepared: a concurrent caller runs
	// its query unprepared rather than prepare it too, so that a burst of
	// first calls does not queue dozens of identical compilations on the
	// one connection.
	inFlight map[string]bool
	closed   bool
}

// lookup returns the prepared query, or nil.
func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// prepare returns the prepared query, preparing it on the pool first if
// needed, or nil when it cannot be prepared now (the caller runs it
// unprepared, and sees the error if there is one). It must not be called
// while the caller holds a transaction: preparing takes a connection.
func (c *stmtCache) prepare(ctx context.Context, query string) *sql.Stmt {
	c.mu.Lock()
	if st, ok := c.m[query]; ok || c.closed || c.inFlight[query] {
		c.mu.Unlock()
		return st
	}
	c.inFlight[query] = true
	c.mu.Unlock()

	st, err := c.db.PrepareContext(ctx, query)

	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inFlight, query)
	if err != nil {
		return nil
	}
	if c.closed {
		_ = st.Close()
		return nil
	}
	c.m[query] = st
	return st
}

// prepareAll prepares every query a transaction may run, until all are.
func (c *stmtCache) prepareAll(ctx context.Context) {
	if c.all.Load() || !c.preparingAll.CompareAndSwap(false, true) {
		return
	}
	defer c.preparingAll.Store(false)
	for _, q := range allQueries {
		if c.prepare(ctx, q) == nil {
			return // try again at the next Begin
		}
	}
	c.all.Store(true)
}

// close closes every prepared statement; later calls prepare nothing.
func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for q, st := range c.m {
		errs = append(errs, st.Close())
		delete(c.m, q)
	}
	return errors.Join(errs...)
}
