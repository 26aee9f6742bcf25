package core_test

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// storeMethod returns the name of the Executor method a row's Store is a
// method expression of ("" for none).
func storeMethod(t *testing.T, tr core.Transition) string {
	t.Helper()
	if tr.Store == nil {
		return ""
	}
	v := reflect.ValueOf(tr.Store)
	require.Equal(t, reflect.Func, v.Kind(), "%s", tr.Event)
	require.Equal(t, reflect.TypeFor[core.Executor](), v.Type().In(0), "%s: Store takes the Executor first", tr.Event)
	name := runtime.FuncForPC(v.Pointer()).Name()
	const prefix = "github.com/idemgate/idemgate/internal/core.Executor."
	require.True(t, strings.HasPrefix(name, prefix), "%s: Store is %s, not a method expression of Executor", tr.Event, name)
	return strings.TrimPrefix(name, prefix)
}

// TestTransitionsTable checks the state machine's table itself: one row per
// event, every status reachable, terminal statuses left only by take-over
// and re-drive (and the pruner), and every row naming a store method of
// Executor.
func TestTransitionsTable(t *testing.T) {
	t.Parallel()
	seen := map[core.Event]bool{}
	reached := map[vocab.Status]bool{}
	for _, tr := range core.Transitions {
		require.False(t, seen[tr.Event], "event %s twice", tr.Event)
		seen[tr.Event] = true
		method := storeMethod(t, tr)
		_, ok := reflect.TypeFor[core.Executor]().MethodByName(method)
		switch tr.Event {
		case core.EventExpire, core.EventArchive, core.EventForget:
			// No status after: the claim stays as it is (expire) or leaves
			// the claims' table (archive, forget).
			require.Empty(t, tr.To, "%s", tr.Event)
			require.Equal(t, tr.Event == core.EventExpire, method == "", "%s: only expire writes nothing", tr.Event)
		default:
			require.True(t, vocab.ValidStatus(tr.To), "%s", tr.Event)
			reached[tr.To] = true
			require.True(t, ok, "%s: Executor has no method %q", tr.Event, method)
		}
		require.NotEmpty(t, tr.Condition, "%s", tr.Event)
		for _, from := range tr.From {
			require.True(t, vocab.ValidStatus(from), "%s", tr.Event)
			if from.Terminal() {
				require.Contains(t, []core.Event{core.EventTakeOver, core.EventAwaitTakeOver, core.EventRedrive, core.EventExpire, core.EventArchive,
					core.EventSettle, core.EventSettleFailed}, tr.Event,
					"only a take-over, a re-drive, the clock and the pruner, or the provider's settlement of an unknown outcome leave a terminal status")
			}
		}
		require.Equal(t, tr.Event, core.TransitionOf(tr.Event).Event)
	}
	for _, s := range []vocab.Status{vocab.StatusAwaitingApproval, vocab.StatusQueued, vocab.StatusRunning, vocab.StatusSucceeded, vocab.StatusFailed} {
		require.True(t, reached[s], "no event leads to %s", s)
	}
	require.True(t, core.TransitionOf(core.EventLease).Allows(vocab.StatusQueued))
	require.False(t, core.TransitionOf(core.EventComplete).Allows(vocab.StatusQueued), "only a lease holder completes")
	require.False(t, core.TransitionOf(core.EventCancel).Allows(vocab.StatusRunning), "a running operation is not cancelled")
	require.Panics(t, func() { core.TransitionOf("no_such_event") })
}

// TestTransitionCheck checks the refusals the gate answers from the table.
func TestTransitionCheck(t *testing.T) {
	t.Parallel()
	redrive := core.TransitionOf(core.EventRedrive)
	cancelled := &core.Claim{Status: vocab.StatusFailed, Error: &vocab.ErrorInfo{Code: vocab.CodeCancelled}}
	declined := &core.Claim{Status: vocab.StatusFailed, Error: &vocab.ErrorInfo{Code: vocab.CodeCardDeclined}}
	require.ErrorIs(t, redrive.Check(cancelled, core.Facts{}), core.ErrRedriveCancelled, "an owner's cancellation is final")
	require.NoError(t, redrive.Check(declined, core.Facts{}))
	require.ErrorIs(t, redrive.Check(&core.Claim{Status: vocab.StatusSucceeded}, core.Facts{}), core.ErrRedriveSucceeded)
	require.ErrorIs(t, redrive.Check(&core.Claim{Status: vocab.StatusRunning}, core.Facts{}), core.ErrRedriveNotFailed)

	cancel := core.TransitionOf(core.EventCancel)
	require.NoError(t, cancel.Check(&core.Claim{Status: vocab.StatusQueued}, core.Facts{}))
	require.ErrorIs(t, cancel.Check(&core.Claim{Status: vocab.StatusQueued}, core.Facts{JobFetched: true}), core.ErrCancelStarted)
	require.ErrorIs(t, cancel.Check(&core.Claim{Status: vocab.StatusQueued, Attempts: 1}, core.Facts{}), core.ErrCancelStarted)
	require.NoError(t, cancel.Check(&core.Claim{Status: vocab.StatusQueued, Attempts: 1}, core.Facts{AttemptsLeaveNoEffect: true}))
	require.ErrorIs(t, cancel.Check(&core.Claim{Status: vocab.StatusRunning}, core.Facts{}), core.ErrCancelStarted)
	require.ErrorIs(t, cancel.Check(&core.Claim{Status: vocab.StatusFailed}, core.Facts{}), core.ErrCancelTerminal)

	for _, e := range []core.Event{core.EventSettle, core.EventSettleFailed} {
		settle := core.TransitionOf(e)
		require.NoError(t, settle.Check(&core.Claim{Status: vocab.StatusFailed, Error: &vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown}}, core.Facts{}), e)
		require.NoError(t, settle.Check(&core.Claim{Status: vocab.StatusRunning}, core.Facts{}), "%s: a running claim past its lease", e)
		require.ErrorIs(t, settle.Check(&core.Claim{Status: vocab.StatusRunning, LeaseLive: true}, core.Facts{}), core.ErrSettleKnown, e)
		require.ErrorIs(t, settle.Check(declined, core.Facts{}), core.ErrSettleKnown, "%s: a known failure stays", e)
		require.ErrorIs(t, settle.Check(cancelled, core.Facts{}), core.ErrSettleKnown, e)
		require.ErrorIs(t, settle.Check(&core.Claim{Status: vocab.StatusSucceeded}, core.Facts{}), core.ErrSettleKnown, e)
		require.ErrorIs(t, settle.Check(&core.Claim{Status: vocab.StatusQueued}, core.Facts{}), core.ErrSettleKnown, e)
	}

	takeOver := core.TransitionOf(core.EventTakeOver)
	require.ErrorIs(t, takeOver.Check(&core.Claim{Status: vocab.StatusSucceeded}, core.Facts{}), core.ErrStateRefused, "the replay window is open")
	require.NoError(t, takeOver.Check(&core.Claim{Status: vocab.StatusSucceeded, Expired: true}, core.Facts{}))
	require.ErrorIs(t, takeOver.Check(&core.Claim{Status: vocab.StatusQueued, Expired: true}, core.Facts{}), core.ErrStateRefused)
}
