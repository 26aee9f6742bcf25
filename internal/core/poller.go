package core

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultPollInterval is how often a process with waiting calls asks the
// database which of their claims turned terminal (Config.PollInterval).
const DefaultPollInterval = 20 * time.Millisecond

// poller is the gate's own Waiter: while any call of the process waits for
// an outcome, one query per interval reads which of the awaited claims are
// terminal, for all of them at once. Nothing is sent by the transactions
// that end claims (no trigger, no NOTIFY whose commit-time lock would
// serialize them), nothing is read while nobody waits, and it needs no
// session of its own, so it works through a transaction-pooling
// connection pooler.
type poller struct {
	store    Store
	interval time.Duration
	timeout  time.Duration
	logger   *slog.Logger

	mu      sync.Mutex
	waiting map[int64]map[*subscription]struct{}
	running bool
}

type subscription struct {
	ch chan struct{}
}

// Subscribe implements Waiter: the channel receives once the claim is
// terminal, whenever it turned so (before the subscription too).
func (p *poller) Subscribe(claimID int64) (<-chan struct{}, func()) {
	sub := &subscription{ch: make(chan struct{}, 1)}
	p.mu.Lock()
	if p.waiting == nil {
		p.waiting = map[int64]map[*subscription]struct{}{}
	}
	if p.waiting[claimID] == nil {
		p.waiting[claimID] = map[*subscription]struct{}{}
	}
	p.waiting[claimID][sub] = struct{}{}
	if !p.running {
		p.running = true
		go p.run()
	}
	p.mu.Unlock()
	return sub.ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.waiting[claimID], sub)
		if len(p.waiting[claimID]) == 0 {
			delete(p.waiting, claimID)
		}
	}
}

// run polls until nobody waits. The first poll comes after a quarter of
// the interval: a lone call's job often ends within a few milliseconds.
func (p *poller) run() {
	first := time.NewTimer(p.interval / 4)
	defer first.Stop()
	ticker := time.NewTicker(p.interval)
	defer ticker.Stop()
	failing := false // logged once per outage, not once per tick
	for tick := first.C; ; tick = ticker.C {
		<-tick
		ids := p.awaited()
		if ids == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		terminal, err := p.store.ClaimListTerminal(ctx, &ClaimListTerminalParams{IDs: ids})
		cancel()
		if err != nil {
			// The waiters answer with the handle when their wait ends.
			if !failing {
				p.logger.Warn("gate: reading awaited claims failed; polling on", "error", err)
			}
			failing = true
			continue
		}
		failing = false
		p.wake(terminal)
	}
}

// awaited returns the claims someone waits for, or nil (and stops the
// poller) when nobody does.
func (p *poller) awaited() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiting) == 0 {
		p.running = false
		return nil
	}
	ids := make([]int64, 0, len(p.waiting))
	for id := range p.waiting {
		ids = append(ids, id)
	}
	return ids
}

// wake signals every subscription of the terminal claims.
func (p *poller) wake(terminal []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range terminal {
		for sub := range p.waiting[id] {
			select {
			case sub.ch <- struct{}{}:
			default:
			}
		}
	}
}
