package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// refundTrace is the spans of one refund, from the MCP request to Stripe.
type refundTrace struct {
	request, call, claim, insert, work, stripe sdktrace.ReadOnlySpan
}

// findRefundTrace finds, among the ended spans, the trace of the call
// whose gate.claim span accepted key; it is nil until all its spans ended.
func findRefundTrace(spans []sdktrace.ReadOnlySpan, key string) *refundTrace {
	var claim sdktrace.ReadOnlySpan
	for _, sp := range spans {
		attrs := sp.Attributes()
		if sp.Name() == "gate.claim" && hasAttr(attrs, attribute.String("idemgate.idempotency_key", key)) &&
			hasAttr(attrs, attribute.String("idemgate.outcome", "accepted")) {
			claim = sp
		}
	}
	if claim == nil {
		return nil
	}
	rt := &refundTrace{claim: claim}
	for _, sp := range spans {
		if sp.SpanContext().TraceID() != claim.SpanContext().TraceID() {
			continue
		}
		switch sp.Name() {
		case "POST /mcp":
			rt.request = sp
		case "tools/call refund_order":
			rt.call = sp
		case "river.insert_many":
			rt.insert = sp
		case "river.work/idemgate.refund_order":
			rt.work = sp
		case "stripe POST /v1/refunds":
			rt.stripe = sp
		}
	}
	if rt.request == nil || rt.call == nil || rt.insert == nil || rt.work == nil || rt.stripe == nil {
		return nil
	}
	return rt
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == want {
			return true
		}
	}
	return false
}

// TestOneTraceFromTheMCPRequestToStripe makes a refund over MCP with an
// in-memory span recorder (synchronous: a span is recorded when it ends)
// and follows it: the api's request span, the MCP call's span, the claim,
// the River insert and work, and the Stripe call are one trace, parent to
// child; the
// operation's audit rows and its log lines carry that trace id.
func TestOneTraceFromTheMCPRequestToStripe(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	logger, logs := logtest.New()
	b := setupWorkerTraced(t, 10*time.Second, logger, tp)

	const key = "refund-traced-0001"
	res, isErr := callTool(t, b.session, "refund_order", refund(key, 1500))
	require.False(t, isErr)
	require.Equal(t, vocab.StatusSucceeded, res.Operation.Status)

	var rt *refundTrace
	// The request's and the job's spans end just after the answer: wait
	// for them (the bound only stops a broken test).
	require.Eventually(t, func() bool { rt = findRefundTrace(rec.Ended(), key); return rt != nil },
		60*time.Second, 20*time.Millisecond, "the refund's trace never completed")
	traceID := rt.claim.SpanContext().TraceID()

	require.Equal(t, trace.SpanKindServer, rt.request.SpanKind())
	require.True(t, hasAttr(rt.request.Attributes(), attribute.String("http.route", "/mcp")))
	require.Equal(t, trace.SpanKindServer, rt.call.SpanKind())
	require.True(t, hasAttr(rt.call.Attributes(), attribute.String("gen_ai.tool.name", "refund_order")))
	require.Equal(t, rt.request.SpanContext().SpanID(), rt.call.Parent().SpanID(), "MCP call in the request")
	require.Equal(t, rt.call.SpanContext().SpanID(), rt.claim.Parent().SpanID(), "claim in the MCP call")
	require.Equal(t, rt.claim.SpanContext().SpanID(), rt.insert.Parent().SpanID(), "River insert in the claim")
	require.Equal(t, rt.insert.SpanContext().SpanID(), rt.work.Parent().SpanID(), "job worked under its insert")
	require.Len(t, rt.work.Links(), 1, "and linked to it, as otelriver does")
	require.Equal(t, rt.insert.SpanContext().SpanID(), rt.work.Links()[0].SpanContext.SpanID())
	require.Equal(t, trace.SpanKindClient, rt.stripe.SpanKind())
	require.Equal(t, rt.work.SpanContext().SpanID(), rt.stripe.Parent().SpanID(), "Stripe called by the job")

	rows, err := b.pool.Query(context.Background(), `SELECT decision, coalesce(trace_id, '') FROM audit_events
		WHERE tenant_id = 'acme' AND tool = 'refund_order' AND idempotency_key = $1 ORDER BY id`, key)
	require.NoError(t, err)
	var decisions []string
	for rows.Next() {
		var decision, rowTrace string
		require.NoError(t, rows.Scan(&decision, &rowTrace))
		decisions = append(decisions, decision)
		require.Equal(t, traceID.String(), rowTrace, "audit row %s", decision)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"accepted", "started", "succeeded"}, decisions)

	requireLogLine(t, logs.String(), "http request", traceID)        // the api's access log
	requireLogLine(t, logs.String(), "operation succeeded", traceID) // the worker's job log
}

// requireLogLine fails unless a JSON log line with msg carries traceID.
func requireLogLine(t *testing.T, logs, msg string, traceID trace.TraceID) {
	t.Helper()
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg && rec["trace_id"] == traceID.String() {
			return
		}
	}
	t.Fatalf("no %q log line carries trace %s", msg, traceID)
}

// TestRESTSpansAreNamedByRoute checks the REST twin's span name: the
// route, never the raw path.
func TestRESTSpansAreNamedByRoute(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b := setupWorkerTraced(t, 0, nil, tp)
	resp, _ := rest(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, "refund-rest-traced-1",
		map[string]any{"order_id": "ord_9f2", "amount_cents": 100})
	require.Less(t, resp.StatusCode, 300)
	require.Eventually(t, func() bool {
		for _, sp := range rec.Ended() {
			if sp.Name() == "POST /v1/tools/{tool}" && hasAttr(sp.Attributes(), attribute.String("http.route", "/v1/tools/{tool}")) {
				return true
			}
		}
		return false
	}, 60*time.Second, 20*time.Millisecond, "no span named by the route")
	for _, sp := range rec.Ended() {
		if sp.SpanKind() == trace.SpanKindServer {
			require.NotContains(t, sp.Name(), "refund_order", "a raw path in a span name")
		}
	}
}
