// Package groups runs requests in groups, for group commit: a request
// queued while earlier groups run joins the next one, nobody waits for a
// group to fill (a lone request is a group of one), and at most Runners
// groups run at once. The gate's audit batcher and group commit of new
// claims, and the worker's group commit of in-transaction operations, use
// it.
package groups

import "sync"

// Queue queues requests for Do. Set its fields before the first Add.
type Queue[R any] struct {
	// Max is the most requests in a group.
	Max int
	// Runners is how many groups run at once.
	Runners int
	// Do runs one group.
	Do func(group []R)
	// Share, when set, has a group take at most its share of what is
	// queued, (queued + Runners - 1) / Runners, so that a burst is spread
	// over the runners rather than taken by the first one free.
	Share bool
	// Formed, when set (tests), is told the size of every group taken.
	Formed func(n int)

	mu      sync.Mutex
	pending []R
	running int
}

// Add queues r for the next group, starting a runner if fewer than
// Runners run.
func (q *Queue[R]) Add(r R) {
	q.mu.Lock()
	q.pending = append(q.pending, r)
	start := q.running < q.Runners
	if start {
		q.running++
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

// Queued returns how many requests wait for a group.
func (q *Queue[R]) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// run takes and runs groups until none is queued.
func (q *Queue[R]) run() {
	for {
		q.mu.Lock()
		n := min(len(q.pending), q.Max)
		if q.Share {
			n = min(n, (len(q.pending)+q.Runners-1)/q.Runners)
		}
		if n == 0 {
			q.running--
			q.mu.Unlock()
			return
		}
		group := q.pending[:n:n]
		q.pending = q.pending[n:]
		q.mu.Unlock()
		if q.Formed != nil {
			q.Formed(n)
		}
		q.Do(group)
	}
}
