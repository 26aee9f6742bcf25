package gate_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// TestTransitionsTable checks the state machine's table itself: one row per
// event, every status reachable, terminal statuses left only by take-over
// and re-drive, and every row naming a store method of Executor.
func TestTransitionsTable(t *testing.T) {
	t.Parallel()
	seen := map[gate.Event]bool{}
	reached := map[domain.Status]bool{}
	for _, tr := range gate.Transitions {
		require.False(t, seen[tr.Event], "event %s twice", tr.Event)
		seen[tr.Event] = true
		require.True(t, tr.To.Valid(), "%s", tr.Event)
		reached[tr.To] = true
		_, ok := reflect.TypeFor[gate.Executor]().MethodByName(tr.Store)
		require.True(t, ok, "%s: Executor has no method %s", tr.Event, tr.Store)
		require.NotEmpty(t, tr.Condition, "%s", tr.Event)
		for _, from := range tr.From {
			require.True(t, from.Valid(), "%s", tr.Event)
			if from.Terminal() {
				require.Contains(t, []gate.Event{gate.EventTakeOver, gate.EventRedrive}, tr.Event,
					"only a take-over or a re-drive leaves a terminal status")
			}
		}
		require.Equal(t, tr, gate.TransitionOf(tr.Event))
	}
	for _, s := range []domain.Status{domain.StatusQueued, domain.StatusRunning, domain.StatusSucceeded, domain.StatusFailed} {
		require.True(t, reached[s], "no event leads to %s", s)
	}
	require.True(t, gate.TransitionOf(gate.EventLease).Allows(domain.StatusQueued))
	require.False(t, gate.TransitionOf(gate.EventComplete).Allows(domain.StatusQueued), "only a lease holder completes")
	require.False(t, gate.TransitionOf(gate.EventCancel).Allows(domain.StatusRunning), "a running operation is not cancelled")
	require.Panics(t, func() { gate.TransitionOf("no_such_event") })
}
