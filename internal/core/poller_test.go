package core

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pollStore answers ClaimListTerminal from terminal and counts the polls.
type pollStore struct {
	Store
	mu       sync.Mutex
	terminal map[int64]bool
	polls    int
	asked    [][]int64
}

func (s *pollStore) ClaimListTerminal(_ context.Context, p *ClaimListTerminalParams) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	s.asked = append(s.asked, append([]int64(nil), p.IDs...))
	var out []int64
	for _, id := range p.IDs {
		if s.terminal[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

func (s *pollStore) pollCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

func TestPollerWakesTheWaitersOfTerminalClaimsOnly(t *testing.T) {
	s := &pollStore{terminal: map[int64]bool{}}
	p := &poller{store: s, interval: time.Millisecond, timeout: time.Minute, logger: slog.Default()}
	a, stopA := p.Subscribe(1)
	a2, stopA2 := p.Subscribe(1)
	b, stopB := p.Subscribe(2)

	// Two polls that find nothing terminal wake nobody.
	require.Eventually(t, func() bool { return s.pollCount() >= 2 }, time.Minute, time.Millisecond)
	require.Empty(t, a)
	require.Empty(t, b)

	s.mu.Lock()
	s.terminal[1] = true
	s.mu.Unlock()
	<-a
	<-a2
	require.Empty(t, b, "claim 2 is not terminal")
	stopA()
	stopA2()

	// Claim 1 is no longer asked for; once nobody waits, polling stops.
	s.mu.Lock()
	s.asked = nil
	s.mu.Unlock()
	require.Eventually(t, func() bool { return s.pollCount() >= 1 && len(s.lastAsked()) > 0 }, time.Minute, time.Millisecond)
	require.Equal(t, []int64{2}, s.lastAsked())
	stopB()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.running
	}, time.Minute, time.Millisecond)
}

func (s *pollStore) lastAsked() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.asked) == 0 {
		return nil
	}
	return s.asked[len(s.asked)-1]
}
