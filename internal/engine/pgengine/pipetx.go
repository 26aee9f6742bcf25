package pgengine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The worker's group transactions (core.WorkTx) send their BEGIN with the
// first claim lock and their COMMIT with the last completion, each in one
// batch. pgx begins a pgx.Tx with a round trip of its own and ends it with
// another, so these transactions are a pgx.Tx of their own (pipeTx) on a
// connection of the pool: River's JobCompleteTx and the effects run in it
// as in any other.

var _ core.PipelineBeginner = (*Store)(nil)

// BeginLock implements core.PipelineBeginner: BEGIN and the claim's lock
// in one round trip.
func (s *Store) BeginLock(ctx context.Context, lock *core.ClaimLeaseParams) (core.Tx, *Claim, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, translate(err)
	}
	ptx := &pipeTx{pc: pc}
	b := &pgx.Batch{}
	b.Queue(sqlBeginReadCommitted)
	b.Queue(sqlClaimLock, lock.OperationID, lock.JobID, lock.Now)
	br := pc.SendBatch(ctx, b)
	_, err = br.Exec()
	var locked *Claim
	if err == nil {
		locked, err = scanClaim(br.QueryRow())
		err = translate(err)
	}
	if cerr := br.Close(); cerr != nil && (err == nil || errors.Is(err, vocab.ErrNotFound)) {
		err = translate(cerr)
	}
	tx := &Tx{executor: executor{q: ptx}, tx: ptx}
	switch {
	case errors.Is(err, vocab.ErrNotFound): // matched no row: read the claim to tell why
		locked, err = enginesql.Leased(nil, err, tx.leaseRead(ctx, lock))
		return tx, locked, err
	case err != nil:
		_ = tx.Rollback(ctx)
		return nil, nil, err
	}
	return tx, locked, nil
}

// CommitWith implements core.Pipeliner: the completion and COMMIT in one
// round trip, on a transaction BeginLock began (else one after the
// other).
func (t *Tx) CommitWith(ctx context.Context, complete *core.ClaimCompleteParams) (*Claim, error) {
	ptx, ok := t.tx.(*pipeTx)
	if !ok {
		done, err := t.ClaimComplete(ctx, complete)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", core.ErrTxBroken, err)
		}
		return done, t.Commit(ctx)
	}
	return ptx.commitWith(ctx, complete)
}

// pipeTx is a pgx.Tx on a pooled connection whose BEGIN was sent with
// another statement (BeginLock). Commit and Rollback end it and give the
// connection back; nested transactions are savepoints. It has no large
// objects.
type pipeTx struct {
	pc     *pgxpool.Conn
	nested int
	closed bool
}

// end gives the connection back: to the pool when it is idle, else the
// pool closes it.
func (t *pipeTx) end() {
	t.closed = true
	t.pc.Release()
}

func (t *pipeTx) commitWith(ctx context.Context, complete *core.ClaimCompleteParams) (*Claim, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	defer t.end()
	b := &pgx.Batch{}
	sql, args := claimCompleteSQL(complete)
	b.Queue(sql, args...)
	b.Queue(sqlClaimCompletedCheck, complete.ID, complete.Epoch+1)
	b.Queue(sqlCommit)
	br := t.pc.SendBatch(ctx, b)
	done, err := scanClaim(br.QueryRow())
	if done, err = enginesql.Conditional(done, translate(err), vocab.ErrLeaseLost); err == nil {
		_, err = br.Exec()
	}
	if err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("%w: %w", core.ErrTxBroken, err)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, translate(err)
	}
	if tag.String() != "COMMIT" {
		return nil, pgx.ErrTxCommitRollback
	}
	return done, nil
}

// Begin starts a nested transaction: a savepoint.
func (t *pipeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	t.nested++
	sp := &pipeSavepoint{pipeTx: t, name: "idemgate_nested_" + strconv.Itoa(t.nested)}
	if _, err := t.pc.Exec(ctx, "SAVEPOINT "+sp.name); err != nil {
		return nil, err
	}
	return sp, nil
}

// Commit commits the transaction and gives the connection back.
func (t *pipeTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	defer t.end()
	tag, err := t.pc.Exec(ctx, sqlCommit)
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls the transaction back and gives the connection back.
func (t *pipeTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	defer t.end()
	_, err := t.pc.Exec(ctx, "ROLLBACK")
	return err
}

func (t *pipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	return t.pc.CopyFrom(ctx, table, columns, src)
}

func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.pc.SendBatch(ctx, b)
}

// LargeObjects panics: pgx offers no way to build them for a pgx.Tx of
// another package, and nothing of idemgate or River uses them.
func (t *pipeTx) LargeObjects() pgx.LargeObjects {
	panic("pgengine: a worker group's transaction has no large objects")
}

func (t *pipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.pc.Conn().Prepare(ctx, name, sql)
}

func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.pc.Exec(ctx, sql, args...)
}

func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.pc.Query(ctx, sql, args...)
}

func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.pc.QueryRow(ctx, sql, args...)
}

func (t *pipeTx) Conn() *pgx.Conn { return t.pc.Conn() }

// pipeSavepoint is a nested pgx.Tx of a pipeTx: the parent's statements,
// its own end.
type pipeSavepoint struct {
	*pipeTx
	name string
	done bool
}

func (s *pipeSavepoint) Commit(ctx context.Context) error {
	if s.done {
		return pgx.ErrTxClosed
	}
	s.done = true
	_, err := s.pc.Exec(ctx, "RELEASE SAVEPOINT "+s.name)
	return err
}

func (s *pipeSavepoint) Rollback(ctx context.Context) error {
	if s.done {
		return pgx.ErrTxClosed
	}
	s.done = true
	_, err := s.pc.Exec(ctx, "ROLLBACK TO SAVEPOINT "+s.name)
	return err
}
