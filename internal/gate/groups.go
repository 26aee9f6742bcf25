package gate

import "sync"

// groups runs requests in groups: a request queued while earlier groups
// run joins the next one, nobody waits for a group to fill (a lone request
// is a group of one), and at most runners groups run at once. The audit
// batcher and the group commit of claims share it.
type groups[R any] struct {
	max     int // requests per group
	runners int // groups at once
	do      func(group []R)
	// formed, when set (tests), is told the size of every group taken.
	formed func(n int)

	mu      sync.Mutex
	pending []R
	running int
}

// add queues r for the next group, starting a runner if fewer than
// runners run.
func (g *groups[R]) add(r R) {
	g.mu.Lock()
	g.pending = append(g.pending, r)
	start := g.running < g.runners
	if start {
		g.running++
	}
	g.mu.Unlock()
	if start {
		go g.run()
	}
}

// queued returns how many requests wait for a group.
func (g *groups[R]) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// run takes and runs groups until none is queued.
func (g *groups[R]) run() {
	for {
		g.mu.Lock()
		n := min(len(g.pending), g.max)
		if n == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		group := g.pending[:n:n]
		g.pending = g.pending[n:]
		g.mu.Unlock()
		if g.formed != nil {
			g.formed(n)
		}
		g.do(group)
	}
}
