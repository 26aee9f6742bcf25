package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrNoSavepoints: the store's transactions have no savepoints
// (Savepointer), so a WorkTx holds one operation.
var ErrNoSavepoints = errors.New("gate: the store's transactions have no savepoints")

// WorkTx is one transaction shared by the in-transaction operations of a
// group (the worker's group commit). Each operation begins with Mark, is
// locked (Lock), runs its effect in Tx and stores its outcome (Apply),
// then ends with Keep, or with Undo, which takes back its writes and
// nothing else. Commit stores every operation kept, with one commit, and
// Committed returns their claims. The first operation of a transaction
// needs no savepoint: its Undo rolls the transaction back, and the next
// Mark begins another; each later one marks a savepoint.
//
// On Postgres (PipelineBeginner, Pipeliner) the statements between two
// effects travel together: BEGIN with the first lock, an operation's
// completion with the next operation's savepoint and lock, the last one
// with COMMIT; a group of k costs 4k+1 round trips (an effect of two
// statements). A completion that fails there breaks the transaction:
// Commit then fails and keeps nothing.
type WorkTx struct {
	g    *Gate
	tx   Tx
	kept []*Claim
	// marked: the operation in progress began at a savepoint; toMark: that
	// savepoint is still to be sent (with the lock, on a Pipeliner);
	// toBegin: so is BEGIN (PipelineBeginner).
	marked, toMark, toBegin bool
	// pending is a completion not yet sent (Pipeliner): the operation in
	// progress's when current, else the last kept one's, whose claim is
	// kept[len(kept)-1] until it is sent.
	pending *ClaimCompleteParams
	current bool
	// broken is the error that made the transaction unusable.
	broken error
}

// BeginWork returns an empty WorkTx: its transaction begins with the
// first Mark.
func (g *Gate) BeginWork() *WorkTx { return &WorkTx{g: g} }

// Mark begins an operation: the transaction when none is open, else a
// savepoint (ErrNoSavepoints when the store has none). ctx bounds the
// transaction on engines that tie it to the context of its BEGIN: keep it
// alive until Commit or Rollback.
func (w *WorkTx) Mark(ctx context.Context) error {
	if w.broken != nil {
		return w.broken
	}
	if w.tx == nil {
		if _, ok := w.g.store.(PipelineBeginner); ok {
			w.marked, w.toMark, w.toBegin = false, false, true // sent with the lock
			return nil
		}
		tx, err := w.g.store.Begin(ctx)
		if err != nil {
			return err
		}
		w.tx, w.marked, w.toMark = tx, false, false
		return nil
	}
	sp, ok := w.tx.(Savepointer)
	if !ok {
		return ErrNoSavepoints
	}
	w.marked = true
	if _, ok := w.tx.(Pipeliner); ok {
		w.toMark = true // sent with the lock
		return nil
	}
	return sp.Savepoint(ctx)
}

// Tx is the transaction (after Mark), which the operation's effect writes
// in.
func (w *WorkTx) Tx() Tx { return w.tx }

// Lock locks the operation's claim for its job when the lease is to be
// had (ClaimLock); otherwise it answers as ClaimLock does, and LockTx
// tells why.
func (w *WorkTx) Lock(ctx context.Context, p *LeaseParams) (*Claim, error) {
	if w.broken != nil {
		return nil, w.broken
	}
	if w.toBegin {
		w.toBegin = false
		tx, locked, err := w.g.store.(PipelineBeginner).BeginLock(ctx, p.store(nil))
		w.tx = tx
		return locked, err
	}
	pl, ok := w.tx.(Pipeliner)
	if !ok {
		return w.tx.ClaimLock(ctx, p.store(nil))
	}
	completed, locked, err := pl.PipelineLock(ctx, w.pending, w.toMark, p.store(nil))
	if w.pending != nil && completed != nil {
		w.kept[len(w.kept)-1] = completed
	}
	if errors.Is(err, ErrTxBroken) {
		w.broken = err
		return nil, err
	}
	w.pending, w.toMark = nil, false
	return locked, err
}

// Apply stores the outcome of the operation on c, which Lock locked
// (EventApply: the lease and the result in one fenced write with the
// audit row), and completes its job, as Complete does with Locked. On a
// Pipeliner the job is completed first and the outcome is sent with the
// next statement.
func (w *WorkTx) Apply(ctx context.Context, c *Claim, result json.RawMessage, job JobHooks) error {
	if w.broken != nil {
		return w.broken
	}
	if _, ok := w.tx.(Pipeliner); !ok {
		done, _, err := w.g.complete(ctx, w.tx, &CompleteParams{Locked: true, Claim: c, Result: result, Job: job})
		if err == nil {
			w.kept = append(w.kept, done)
			w.current = true
		}
		return err
	}
	if err := TransitionOf(EventApply).Check(c, Facts{}); err != nil {
		return err
	}
	w.g.completeJob(ctx, w.tx, c, job)
	w.pending = completeParams(ctx, c, EventApply, result)
	w.kept = append(w.kept, c) // replaced by the stored claim once sent
	w.current = true
	return nil
}

// Keep ends the operation; the commit stores it.
func (w *WorkTx) Keep() { w.current = false }

// Undo takes back the operation in progress. An error leaves the
// transaction unusable: Rollback it.
func (w *WorkTx) Undo(ctx context.Context) error {
	if w.current { // its completion, if pending, is its own
		w.kept = w.kept[:len(w.kept)-1]
		w.pending, w.current = nil, false
	}
	if w.toBegin { // never sent: nothing of this operation was
		w.toBegin = false
		return nil
	}
	if w.tx == nil || w.broken != nil {
		return w.broken
	}
	if w.marked {
		if w.toMark { // never sent: nothing of this operation was
			w.toMark = false
			return nil
		}
		return w.tx.(Savepointer).RollbackToSavepoint(ctx)
	}
	// The first operation: nothing else is in the transaction.
	err := w.tx.Rollback(ctx)
	w.tx = nil
	return err
}

// Kept returns how many operations Commit would store.
func (w *WorkTx) Kept() int { return len(w.kept) }

// Commit stores the operations kept, together, and reports them
// (Config.OnTransition).
func (w *WorkTx) Commit(ctx context.Context) error {
	if w.broken != nil {
		return w.broken
	}
	if w.tx == nil {
		return nil
	}
	if w.current {
		return errors.New("gate: WorkTx.Commit with an operation neither kept nor undone")
	}
	if w.pending != nil { // only a Pipeliner leaves one
		done, err := w.tx.(Pipeliner).CommitWith(ctx, w.pending)
		if err != nil {
			return err
		}
		w.kept[len(w.kept)-1], w.pending = done, nil
	} else if err := w.tx.Commit(ctx); err != nil {
		return err
	}
	w.g.observeN(EventApply, len(w.kept))
	return nil
}

// Flush sends a completion that Apply left to go with the next
// statement (Pipeliner), now; a failure breaks the transaction.
func (w *WorkTx) Flush(ctx context.Context) error {
	if w.broken != nil || w.pending == nil {
		return w.broken
	}
	done, err := w.tx.ClaimComplete(ctx, w.pending)
	if err != nil {
		w.broken = fmt.Errorf("%w: %w", ErrTxBroken, err)
		return w.broken
	}
	w.kept[len(w.kept)-1], w.pending = done, nil
	return nil
}

// Committed returns the claims Commit stored, in the order kept.
func (w *WorkTx) Committed() []*Claim { return w.kept }

// Rollback abandons the transaction and every operation in it; after
// Commit it does nothing.
func (w *WorkTx) Rollback(ctx context.Context) error {
	if w.tx == nil {
		return nil
	}
	return w.tx.Rollback(ctx)
}
