package coretest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// traceTests check the gate.claim span and the trace ids of audit rows.
var traceTests = map[string]func(t *testing.T, s *suite){
	"ClaimSpanAndAuditRowsCarryTheTrace": func(t *testing.T, s *suite) {
		ctx := context.Background()
		rec := tracetest.NewSpanRecorder() // synchronous: a span is recorded when it ends
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		traced, err := core.New(&core.Config{Store: s.Store, Enqueuer: s.Enqueuer, Waiter: s.Waiter,
			Policies: Policies(), Secret: Secret, DBTimeout: 30 * time.Second, TracerProvider: tp})
		require.NoError(t, err)

		callCtx, call := tp.Tracer("test").Start(ctx, "call")
		res := Claim(callCtx, t, traced, &ClaimOpts{Key: "traced-key-0001"})
		call.End()
		again := Claim(ctx, t, s.gate, &ClaimOpts{Key: "traced-key-0001"}) // no trace
		require.Equal(t, vocab.OutcomeInFlight, again.Outcome)
		workCtx, work := tp.Tracer("test").Start(ctx, "work")
		_, err = s.gate.Enter(workCtx, &core.LeaseParams{Claim: res.Claim, JobID: res.Claim.JobID, Lease: time.Minute})
		work.End()
		require.NoError(t, err)

		var claimSpan sdktrace.ReadOnlySpan
		for _, sp := range rec.Ended() {
			if sp.Name() == "gate.claim" {
				require.Nil(t, claimSpan, "one gate.claim span")
				claimSpan = sp
			}
		}
		require.NotNil(t, claimSpan)
		require.Equal(t, call.SpanContext().TraceID(), claimSpan.SpanContext().TraceID())
		require.Equal(t, call.SpanContext().SpanID(), claimSpan.Parent().SpanID())
		require.Contains(t, claimSpan.Attributes(), attribute.String("idemgate.outcome", "accepted"))
		require.Contains(t, claimSpan.Attributes(), attribute.String("idemgate.operation_id", res.Claim.OperationID))

		events := audit(ctx, t, s.Store, "acme", "refund_order", "traced-key-0001")
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionInFlight, vocab.DecisionStarted}, decisions(events))
		require.Equal(t, call.SpanContext().TraceID().String(), events[0].TraceID)
		require.Empty(t, events[1].TraceID, "an untraced call stores no trace id")
		require.Equal(t, work.SpanContext().TraceID().String(), events[2].TraceID)
	},
}
