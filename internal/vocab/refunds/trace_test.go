package refunds_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

// headerRecorder keeps the headers of the requests it carries.
type headerRecorder struct {
	mu      sync.Mutex
	headers []http.Header
}

func (h *headerRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.headers = append(h.headers, r.Header.Clone())
	h.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func TestStripeRequestsAreClientSpans(t *testing.T) {
	t.Parallel()
	srv, ts := stripetest.Start(t, nil)
	srv.AddCharge("ch_123", 5000, "usd")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	sent := &headerRecorder{}
	c, err := refunds.NewClient(&refunds.Config{APIKey: stripetest.TestAPIKey, BaseURL: ts.URL,
		HTTPClient: &http.Client{Transport: sent}, TracerProvider: tp})
	require.NoError(t, err)

	ctx, parent := tp.Tracer("test").Start(context.Background(), "job")
	_, err = c.Create(ctx, request("idg_t_0"))
	parent.End()
	require.NoError(t, err)

	var stripe []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == "stripe POST /v1/refunds" {
			stripe = append(stripe, sp)
		}
	}
	require.Len(t, stripe, 1)
	require.Equal(t, trace.SpanKindClient, stripe[0].SpanKind())
	require.Equal(t, parent.SpanContext().TraceID(), stripe[0].SpanContext().TraceID())
	require.Equal(t, parent.SpanContext().SpanID(), stripe[0].Parent().SpanID())
	require.Len(t, sent.headers, 1)
	require.Empty(t, sent.headers[0].Get("Traceparent"), "no trace context is sent to Stripe")
}
