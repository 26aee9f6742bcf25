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
	l := newFailureLimiter(0.5, 3) // 3 at once, one more every 2s
	l.now = func() time.Time { return now }

	for range 3 {
		_, blocked := l.blocked("10.0.0.1")
		require.False(t, blocked)
		l.failed("10.0.0.1")
	}
	wait, blocked := l.blocked("10.0.0.1")
	require.True(t, blocked)
	require.Equal(t, 2*time.Second, wait)
	_, blocked = l.blocked("10.0.0.2")
	require.False(t, blocked, "per address")

	now = now.Add(time.Second)
	wait, blocked = l.blocked("10.0.0.1")
	require.True(t, blocked)
	require.Equal(t, time.Second, wait)
	now = now.Add(time.Second)
	_, blocked = l.blocked("10.0.0.1")
	require.False(t, blocked, "one failure refilled")
	l.failed("10.0.0.1")
	_, blocked = l.blocked("10.0.0.1")
	require.True(t, blocked)

	var none *failureLimiter = newFailureLimiter(-1, 3)
	require.Nil(t, none)
	none.failed("10.0.0.1")
	_, blocked = none.blocked("10.0.0.1")
	require.False(t, blocked)
}

// TestFailureLimiterBoundsItsTable: a full table drops idle addresses
// first, then any, and never grows past maxFailureClients.
func TestFailureLimiterBoundsItsTable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newFailureLimiter(1, 2)
	l.now = func() time.Time { return now }
	for i := range maxFailureClients {
		l.failed(fmt.Sprintf("addr-%d", i))
		l.failed(fmt.Sprintf("addr-%d", i))
	}
	require.Len(t, l.clients, maxFailureClients)
	_, blocked := l.blocked("addr-0")
	require.True(t, blocked)

	// Later every bucket is full again: all of them are idle and go.
	now = now.Add(time.Minute)
	l.failed("newcomer")
	require.Len(t, l.clients, 1)

	// A table of busy addresses loses arbitrary ones, one per newcomer.
	for i := range maxFailureClients - 1 {
		l.failed(fmt.Sprintf("busy-%d", i))
		l.failed(fmt.Sprintf("busy-%d", i))
	}
	l.failed("another")
	require.Len(t, l.clients, maxFailureClients)
	_, blocked = l.blocked("another")
	require.False(t, blocked, "one failure of two spent")
}
