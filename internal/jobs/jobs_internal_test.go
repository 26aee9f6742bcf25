package jobs

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/vocab"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		err        error
		code       vocab.Code
		definitive bool
		nothing    bool
	}{
		{"PlainErrorIsTransient", errors.New("connection reset"), "transient", false, false},
		{"Transient", gate.Transient("downstream_unavailable", errors.New("503")), "downstream_unavailable", false, false},
		{"NothingHappened", gate.NothingHappened(vocab.CodeCardDeclined, "declined"), vocab.CodeCardDeclined, true, true},
		{"Happened", gate.Happened("mail_rejected", "550"), "mail_rejected", true, false},
		{"UnknownIsOutcomeUnknown", gate.Unknown(errors.New("no answer")), vocab.CodeOutcomeUnknown, true, false},
		{"WrappedToolError", fmt.Errorf("call: %w", gate.NothingHappened(vocab.CodeNotFound, "no order")), vocab.CodeNotFound, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			info, definitive := classify(tc.err)
			require.Equal(t, tc.code, info.Code)
			require.Equal(t, tc.definitive, definitive)
			require.Equal(t, tc.nothing, info.NothingHappened)
			require.NotEmpty(t, info.Message)
		})
	}
}

func TestVerdictCountsAndGivesUpOnTheLastAttempt(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	r := &Runner{metrics: m}
	transient := gate.Transient("downstream_unavailable", errors.New("503"))

	info, failed := r.verdict(transient, jobInfo{attempt: 1, maxAttempts: MaxAttempts}, "stripe")
	require.False(t, failed, "an early transient error is retried")
	require.Equal(t, vocab.Code("downstream_unavailable"), info.Code)

	info, failed = r.verdict(transient, jobInfo{attempt: MaxAttempts, maxAttempts: MaxAttempts}, "stripe")
	require.True(t, failed, "the last attempt's transient error fails the operation")
	require.Equal(t, vocab.CodeRetriesExhausted, info.Code)
	require.Contains(t, info.Message, "503")

	_, failed = r.verdict(gate.NothingHappened(vocab.CodeCardDeclined, "declined"), jobInfo{attempt: 1, maxAttempts: MaxAttempts}, "stripe")
	require.True(t, failed)

	require.Equal(t, 2.0, testutil.ToFloat64(m.downstream.WithLabelValues("stripe", "transient")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.downstream.WithLabelValues("stripe", "definitive")))
}

func TestNotLeased(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := &core.Claim{Status: vocab.StatusSucceeded}

	result, err := notLeased(t.Context(), c, core.ErrNoRun, time.Minute, log)
	require.Equal(t, "no_effect", result)
	require.NoError(t, err, "a claim that needs no run ends the job")

	result, err = notLeased(t.Context(), c, core.ErrLeaseHeld, time.Minute, log)
	require.Equal(t, "snoozed", result)
	var snooze *river.JobSnoozeError
	require.ErrorAs(t, err, &snooze)
	require.Equal(t, 15*time.Second, snooze.Duration, "a quarter of the lease")

	boom := errors.New("database unavailable")
	result, err = notLeased(t.Context(), c, boom, time.Minute, log)
	require.Equal(t, "retry", result)
	require.ErrorIs(t, err, boom)
}

func TestRunnerConfigAndLeases(t *testing.T) {
	t.Parallel()
	policies := coretest.Policies()
	for i := range policies {
		if policies[i].Tool == "send_password_reset" {
			policies[i].InflightTimeout = 30 * time.Second
		}
	}
	g, err := core.New(&core.Config{Store: nopStore{}, Enqueuer: nopEnqueuer{}, Policies: policies})
	require.NoError(t, err)
	reg := toolspec.NewRegistry()

	for _, tc := range []struct {
		cfg  *RunnerConfig
		want string
	}{
		{&RunnerConfig{Tools: reg, InflightTimeout: time.Minute}, "Gate is required"},
		{&RunnerConfig{Gate: g, InflightTimeout: time.Minute}, "Tools is required"},
		{&RunnerConfig{Gate: g, Tools: reg}, "InflightTimeout must be positive"},
		{&RunnerConfig{Gate: g, Tools: reg, InflightTimeout: time.Minute, MaxGroup: MaxMaxGroup + 1}, "MaxGroup must be between 1 and 64"},
		{&RunnerConfig{Gate: g, Tools: reg, InflightTimeout: time.Minute, MaxGroup: -1}, "MaxGroup must be between 1 and 64"},
		{&RunnerConfig{Gate: g, Tools: reg, InflightTimeout: time.Minute, Groups: -1}, "Groups must be positive"},
	} {
		_, err := NewRunner(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	r, err := NewRunner(&RunnerConfig{Gate: g, Tools: reg, InflightTimeout: time.Minute})
	require.NoError(t, err)
	require.Equal(t, DefaultMaxGroup, r.txGroups.Max)
	require.Equal(t, DefaultGroups, r.txGroups.Runners)
	alone, err := NewRunner(&RunnerConfig{Gate: g, Tools: reg, InflightTimeout: time.Minute, MaxGroup: 1})
	require.NoError(t, err)
	require.Nil(t, alone.txGroups, "MaxGroup 1: every in-transaction job alone")
	require.Equal(t, time.Minute, r.Lease("refund_order"), "the global lease")
	require.Equal(t, 30*time.Second, r.Lease("send_password_reset"), "the tool's own lease")

	// The effect ends well inside River's job timeout, which ends inside
	// the lease: a stuck effect is cut before anyone may reclaim.
	for _, lease := range []time.Duration{time.Second, time.Minute, 2 * time.Minute} {
		require.Less(t, effectDeadline(lease), JobTimeout(lease))
		require.Less(t, JobTimeout(lease), lease)
	}
}

func TestClaimArgs(t *testing.T) {
	t.Parallel()
	c := &core.Claim{ID: 7, OperationID: "op", TenantID: "acme", Tool: "refund_order", IdempotencyKey: "key-0001"}
	args, err := ArgsFor(c)
	require.NoError(t, err)
	require.Equal(t, "idemgate.refund_order", args.Kind(), "the job kind is the tool's name after idemgate's prefix")
	require.Equal(t, ClaimRef{ClaimID: 7, OperationID: "op", TenantID: "acme", Tool: "refund_order", IdempotencyKey: "key-0001"}, args.(ClaimArgs).ClaimRef)
	// Decoded by River for work, the args carry no kind: the tool names it.
	require.Equal(t, "idemgate.apply_credit", ClaimArgs{ClaimRef: ClaimRef{Tool: "apply_credit"}}.Kind())
	require.Equal(t, "idemgate", InsertOpts().Queue, "idemgate's own queue, never River's default")
	require.Equal(t, "idemgate.reaper", ReaperArgs{}.Kind())
	require.Equal(t, "idemgate_maintenance", ReaperArgs{}.InsertOpts().Queue)
	_, err = ArgsFor(&core.Claim{ID: 8})
	require.ErrorContains(t, err, "has no tool")
	opts := InsertOpts()
	require.Equal(t, MaxAttempts, opts.MaxAttempts)
	require.Equal(t, Queue, opts.Queue)
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	require.True(t, retryable(&rivertype.JobRow{State: rivertype.JobStateCancelled, Metadata: []byte(`{}`)}))
	require.True(t, retryable(&rivertype.JobRow{State: rivertype.JobStateDiscarded, Metadata: []byte(`{"other":1}`)}))
	require.False(t, retryable(&rivertype.JobRow{State: rivertype.JobStateRunning, Metadata: []byte(`{}`)}),
		"River leaves a running job alone")
	require.False(t, retryable(&rivertype.JobRow{State: rivertype.JobStateCancelled, Metadata: []byte(`{"cancel_attempted_at":"2026-12-03T00:00:00Z"}`)}),
		"a late cancellation could reach the retried job: a fresh job instead")
	require.False(t, retryable(&rivertype.JobRow{State: rivertype.JobStateCancelled, Metadata: []byte(`not json`)}))
}

func TestMetricsCountEveryTransitionFromZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	m.Transition(core.EventReclaim)
	m.Transition(core.EventReclaim)
	var nilMetrics *Metrics
	nilMetrics.Transition(core.EventLease) // a runner without metrics
	require.Equal(t, 2.0, testutil.ToFloat64(m.transitions.WithLabelValues(string(core.EventReclaim))))
	families, err := reg.Gather()
	require.NoError(t, err)
	var events []string
	for _, f := range families {
		if f.GetName() == "idemgate_claim_transitions_total" {
			for _, s := range f.GetMetric() {
				events = append(events, s.GetLabel()[0].GetValue())
			}
		}
	}
	written := 0
	for _, tr := range core.Transitions {
		if tr.Store != nil {
			written++
		}
	}
	require.Len(t, events, written, "every event that writes is exported from the start: %s", strings.Join(events, ","))
	require.NotContains(t, events, string(core.EventExpire), "expiry writes nothing; archive counts it")
}

// nopStore and nopEnqueuer satisfy core.Config for tests that never touch
// the database.
type nopStore struct{ core.Store }

type nopEnqueuer struct{ core.Enqueuer }
