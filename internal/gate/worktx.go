package gate

import (
	"context"
	"encoding/json"
	"errors"
)

// ErrNoSavepoints: the store's transactions have no savepoints
// (Savepointer), so a WorkTx holds one operation.
var ErrNoSavepoints = errors.New("gate: the store's transactions have no savepoints")

// WorkTx is one transaction shared by the in-transaction operations of a
// group (the worker's group commit). Each operation begins with Mark, is
// locked (Lock), runs its effect in Tx and stores its outcome (Apply),
// then ends with Keep, or with Undo, which takes back its writes and
// nothing else. Commit stores every operation kept, with one commit. The
// first operation of a transaction needs no savepoint: its Undo rolls the
// transaction back, and the next Mark begins another; each later one
// marks a savepoint.
type WorkTx struct {
	g    *Gate
	tx   Tx
	kept int
	// marked: the operation in progress began at a savepoint.
	marked bool
}

// BeginWork returns an empty WorkTx: its transaction begins with the
// first Mark.
func (g *Gate) BeginWork() *WorkTx { return &WorkTx{g: g} }

// Mark begins an operation: the transaction when none is open, else a
// savepoint (ErrNoSavepoints when the store has none). ctx bounds the
// transaction on engines that tie it to the context of its BEGIN: keep it
// alive until Commit or Rollback.
func (w *WorkTx) Mark(ctx context.Context) error {
	if w.tx == nil {
		tx, err := w.g.store.Begin(ctx)
		if err != nil {
			return err
		}
		w.tx, w.marked = tx, false
		return nil
	}
	sp, ok := w.tx.(Savepointer)
	if !ok {
		return ErrNoSavepoints
	}
	if err := sp.Savepoint(ctx); err != nil {
		return err
	}
	w.marked = true
	return nil
}

// Tx is the transaction (after Mark), which the operation's effect writes
// in.
func (w *WorkTx) Tx() Tx { return w.tx }

// Lock locks the operation's claim for its job when the lease is to be
// had (ClaimLock); otherwise it answers as ClaimLock does, and LockTx
// tells why.
func (w *WorkTx) Lock(ctx context.Context, p *LeaseParams) (*Claim, error) {
	return w.tx.ClaimLock(ctx, p.store(nil))
}

// Apply stores the outcome of the operation on c, which Lock locked
// (EventApply: the lease and the result in one fenced write with the
// audit row), and completes its job, as Complete does with Locked.
func (w *WorkTx) Apply(ctx context.Context, c *Claim, result json.RawMessage, job JobHooks) (*Claim, error) {
	done, _, err := w.g.complete(ctx, w.tx, &CompleteParams{Locked: true, Claim: c, Result: result, Job: job})
	return done, err
}

// Keep ends the operation; the commit stores it.
func (w *WorkTx) Keep() { w.kept++ }

// Undo takes back the operation in progress. An error leaves the
// transaction unusable: Rollback it.
func (w *WorkTx) Undo(ctx context.Context) error {
	if w.tx == nil {
		return nil
	}
	if w.marked {
		return w.tx.(Savepointer).RollbackToSavepoint(ctx)
	}
	// The first operation: nothing else is in the transaction.
	err := w.tx.Rollback(ctx)
	w.tx = nil
	return err
}

// Kept returns how many operations Commit would store.
func (w *WorkTx) Kept() int { return w.kept }

// Commit stores the operations kept, together, and reports them
// (Config.OnTransition).
func (w *WorkTx) Commit(ctx context.Context) error {
	if w.tx == nil {
		return nil
	}
	if err := w.tx.Commit(ctx); err != nil {
		return err
	}
	w.g.observeN(EventApply, w.kept)
	return nil
}

// Rollback abandons the transaction and every operation in it; after
// Commit it does nothing.
func (w *WorkTx) Rollback(ctx context.Context) error {
	if w.tx == nil {
		return nil
	}
	return w.tx.Rollback(ctx)
}
