package core

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/groups"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Identical concurrent calls (same tenant, tool, key and fingerprint) are
// folded: one call, the leader, reads and claims; the others wait for it
// and answer from the claim it found or made, each with its own audit row,
// as they would have after their own read. A call never fails by another's
// error: when the leader fails, each follower runs on its own.

// flightKey names identical calls.
type flightKey struct {
	tenant, tool, key, argsHash string
	// confirm is the call's confirmation of a possible duplicate: a call
	// that confirms never shares the stage of one that does not.
	confirm string
}

// flight is one leader's claim, shared with the calls that joined it.
type flight struct {
	done chan struct{}
	// followers counts the calls that joined (under flights.mu).
	followers int
	// st and err are the leader's, set before done is closed.
	st  *stage
	err error
}

// flights are the claims in progress, by call.
type flights struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

// join returns the flight of k and whether the caller leads it (and must
// end it with land).
func (fs *flights) join(k flightKey) (*flight, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.m[k]; ok {
		f.followers++
		return f, false
	}
	if fs.m == nil {
		fs.m = map[flightKey]*flight{}
	}
	f := &flight{done: make(chan struct{})}
	fs.m[k] = f
	return f, true
}

// land ends the flight of k with the leader's stage, waking its followers.
func (fs *flights) land(k flightKey, f *flight, st *stage, err error) {
	fs.mu.Lock()
	delete(fs.m, k)
	fs.mu.Unlock()
	f.st, f.err = st, err
	close(f.done)
}

// stage is what the database said of a call, before any wait: the call
// created the claim (accepted, its audit row committed with it), or found
// a live claim to answer from, or found that the very intent ran before
// and its replay window is over (expired).
type stage struct {
	accepted *ClaimResult
	existing *Claim
	expired  *Claim
	// duplicate is a guarded call refused as a possible duplicate.
	duplicate *ClaimResult
}

// forFollower is the stage a follower answers from: the claim the leader
// created counts as found.
func (st *stage) forFollower() *stage {
	if st.accepted != nil {
		return &stage{existing: st.accepted.Claim}
	}
	return st
}

// maxAuditBatch bounds the rows of one batched audit insert.
const maxAuditBatch = 256

// auditBatcher writes the audit rows of calls answered from an existing
// claim (replayed, in_flight, conflict, expired): rows queued while a
// write is in progress go together in the next one, one statement and one
// commit for all of them. Nothing waits for a batch to fill: a lone row is
// written at once.
type auditBatcher struct {
	store   Store
	timeout time.Duration
	groups  groups.Queue[*auditRequest]
}

func newAuditBatcher(store Store, timeout time.Duration) *auditBatcher {
	b := &auditBatcher{store: store, timeout: timeout}
	b.groups = groups.Queue[*auditRequest]{Max: maxAuditBatch, Runners: 1, Do: b.flush}
	return b
}

type auditRequest struct {
	row  *AuditInsertParams
	done chan error
}

// write appends row and returns once it is committed (or failed).
func (b *auditBatcher) write(ctx context.Context, row *AuditInsertParams) error {
	req := &auditRequest{row: row, done: make(chan error, 1)}
	b.groups.Add(req)
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The row may still be written, as a timed-out insert may commit.
		return errors.Join(vocab.ErrUnavailable, ctx.Err())
	}
}

// flush writes one batch. If a batch of several fails for another reason
// than an outage, each row is written on its own, so that one bad row
// fails only its own call.
func (b *auditBatcher) flush(batch []*auditRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	rows := make([]*AuditInsertParams, len(batch))
	for i, req := range batch {
		rows[i] = req.row
	}
	err := b.store.AuditInsertMany(ctx, rows)
	if err != nil && len(batch) > 1 && !errors.Is(err, vocab.ErrUnavailable) {
		for _, req := range batch {
			req.done <- b.store.AuditInsert(ctx, req.row)
		}
		return
	}
	for _, req := range batch {
		req.done <- err
	}
}
