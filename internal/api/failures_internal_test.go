package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFailureLimiter runs on a clock of its own: no test time passes.
func TestFailureLimiter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewFailureLimiter(0.5, 3) // 3 at once, one more every 2s
	l.now = func() time.Time { return now }

	for range 3 {
		_, blocked := l.Blocked("10.0.0.1")
		require.False(t, blocked)
		l.Failed("10.0.0.1")
	}
	wait, blocked := l.Blocked("10.0.0.1")
	require.True(t, blocked)
	require.Equal(t, 2*time.Second, wait)
	_, blocked = l.Blocked("10.0.0.2")
	require.False(t, blocked, "per address")

	now = now.Add(time.Second)
	wait, blocked = l.Blocked("10.0.0.1")
	require.True(t, blocked)
	require.Equal(t, time.Second, wait)
	now = now.Add(time.Second)
	_, blocked = l.Blocked("10.0.0.1")
	require.False(t, blocked, "one failure refilled")
	l.Failed("10.0.0.1")
	_, blocked = l.Blocked("10.0.0.1")
	require.True(t, blocked)

	var none *FailureLimiter = NewFailureLimiter(-1, 3)
	require.Nil(t, none)
	none.Failed("10.0.0.1")
	_, blocked = none.Blocked("10.0.0.1")
	require.False(t, blocked)
}

// TestFailureLimiterBoundsItsTable: a full table drops idle addresses
// first, then any, and never grows past maxFailureClients.
func TestFailureLimiterBoundsItsTable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewFailureLimiter(1, 2)
	l.now = func() time.Time { return now }
	for i := range maxFailureClients {
		l.Failed(fmt.Sprintf("addr-%d", i))
		l.Failed(fmt.Sprintf("addr-%d", i))
	}
	require.Len(t, l.clients, maxFailureClients)
	_, blocked := l.Blocked("addr-0")
	require.True(t, blocked)

	// Later every bucket is full again: all of them are idle and go.
	now = now.Add(time.Minute)
	l.Failed("newcomer")
	require.Len(t, l.clients, 1)

	// A table of busy addresses loses arbitrary ones, one per newcomer.
	for i := range maxFailureClients - 1 {
		l.Failed(fmt.Sprintf("busy-%d", i))
		l.Failed(fmt.Sprintf("busy-%d", i))
	}
	l.Failed("another")
	require.Len(t, l.clients, maxFailureClients)
	_, blocked = l.Blocked("another")
	require.False(t, blocked, "one failure of two spent")
}
