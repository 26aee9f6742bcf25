package gate_test

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/gate"
)

// storeMethod returns the name of the Executor method a row's Store is a
// method expression of ("" for none).
func storeMethod(t *testing.T, tr gate.Transition) string {
	t.Helper()
	if tr.Store == nil {
		return ""
	}
	v := reflect.ValueOf(tr.Store)
	require.Equal(t, reflect.Func, v.Kind(), "%s", tr.Event)
	require.Equal(t, reflect.TypeFor[gate.Executor](), v.Type().In(0), "%s: Store takes the Executor first", tr.Event)
	name := runtime.FuncForPC(v.Pointer()).Name()
	const prefix = "github.com/idemgate/idemgate/internal/gate.Executor."
	require.True(t, strings.HasPrefix(name, prefix), "%s: Store is %s, not a method expression of Executor", tr.Event, name)
	return strings.TrimPrefix(name, prefix)
}

// TestTransitionsTable checks the state machine's table itself: one row per
// event, every status reachable, terminal statuses left only by take-over
// and re-drive (and the pruner), and every row naming a store method of
// Executor.
func TestTransitionsTable(t *testing.T) {
	t.Parallel()
	seen := map[gate.Event]bool{}
	reached := map[domain.Status]bool{}
	for _, tr := range gate.Transitions {
		require.False(t, seen[tr.Event], "event %s twice", tr.Event)
		seen[tr.Event] = true
		method := storeMethod(t, tr)
		_, ok := reflect.TypeFor[gate.Executor]().MethodByName(method)
		switch tr.Event {
		case gate.EventExpire, gate.EventArchive, gate.EventForget:
			// No status after: the claim stays as it is (expire) or leaves
			// the claims' table (archive, forget).
			require.Empty(t, tr.To, "%s", tr.Event)
			require.Equal(t, tr.Event == gate.EventExpire, method == "", "%s: only expire writes nothing", tr.Event)
		default:
			require.True(t, domain.ValidStatus(tr.To), "%s", tr.Event)
			reached[tr.To] = true
			require.True(t, ok, "%s: Executor has no method %q", tr.Event, method)
		}
		require.NotEmpty(t, tr.Condition, "%s", tr.Event)
		for _, from := range tr.From {
			require.True(t, domain.ValidStatus(from), "%s", tr.Event)
			if from.Terminal() {
				require.Contains(t, []gate.Event{gate.EventTakeOver, gate.EventAwaitTakeOver, gate.EventRedrive, gate.EventExpire, gate.EventArchive}, tr.Event,
					"only a take-over, a re-drive or the clock and the pruner leave a terminal status")
			}
		}
		require.Equal(t, tr.Event, gate.TransitionOf(tr.Event).Event)
	}
	for _, s := range []domain.Status{domain.StatusAwaitingApproval, domain.StatusQueued, domain.StatusRunning, domain.StatusSucceeded, domain.StatusFailed} {
		require.True(t, reached[s], "no event leads to %s", s)
	}
	require.True(t, gate.TransitionOf(gate.EventLease).Allows(domain.StatusQueued))
	require.False(t, gate.TransitionOf(gate.EventComplete).Allows(domain.StatusQueued), "only a lease holder completes")
	require.False(t, gate.TransitionOf(gate.EventCancel).Allows(domain.StatusRunning), "a running operation is not cancelled")
	require.Panics(t, func() { gate.TransitionOf("no_such_event") })
}

// TestTransitionCheck checks the refusals the gate answers from the table.
func TestTransitionCheck(t *testing.T) {
	t.Parallel()
	redrive := gate.TransitionOf(gate.EventRedrive)
	cancelled := &gate.Claim{Status: domain.StatusFailed, Error: &domain.ErrorInfo{Code: domain.CodeCancelled}}
	declined := &gate.Claim{Status: domain.StatusFailed, Error: &domain.ErrorInfo{Code: domain.CodeCardDeclined}}
	require.ErrorIs(t, redrive.Check(cancelled, gate.Facts{}), gate.ErrRedriveCancelled, "an owner's cancellation is final")
	require.NoError(t, redrive.Check(declined, gate.Facts{}))
	require.ErrorIs(t, redrive.Check(&gate.Claim{Status: domain.StatusSucceeded}, gate.Facts{}), gate.ErrRedriveSucceeded)
	require.ErrorIs(t, redrive.Check(&gate.Claim{Status: domain.StatusRunning}, gate.Facts{}), gate.ErrRedriveNotFailed)

	cancel := gate.TransitionOf(gate.EventCancel)
	require.NoError(t, cancel.Check(&gate.Claim{Status: domain.StatusQueued}, gate.Facts{}))
	require.ErrorIs(t, cancel.Check(&gate.Claim{Status: domain.StatusQueued}, gate.Facts{JobFetched: true}), gate.ErrCancelStarted)
	require.ErrorIs(t, cancel.Check(&gate.Claim{Status: domain.StatusQueued, Attempts: 1}, gate.Facts{}), gate.ErrCancelStarted)
	require.NoError(t, cancel.Check(&gate.Claim{Status: domain.StatusQueued, Attempts: 1}, gate.Facts{AttemptsLeaveNoEffect: true}))
	require.ErrorIs(t, cancel.Check(&gate.Claim{Status: domain.StatusRunning}, gate.Facts{}), gate.ErrCancelStarted)
	require.ErrorIs(t, cancel.Check(&gate.Claim{Status: domain.StatusFailed}, gate.Facts{}), gate.ErrCancelTerminal)

	takeOver := gate.TransitionOf(gate.EventTakeOver)
	require.ErrorIs(t, takeOver.Check(&gate.Claim{Status: domain.StatusSucceeded}, gate.Facts{}), gate.ErrStateRefused, "the replay window is open")
	require.NoError(t, takeOver.Check(&gate.Claim{Status: domain.StatusSucceeded, Expired: true}, gate.Facts{}))
	require.ErrorIs(t, takeOver.Check(&gate.Claim{Status: domain.StatusQueued, Expired: true}, gate.Facts{}), gate.ErrStateRefused)
}
