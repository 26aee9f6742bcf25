package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestNoVariablesMeanANoOpProvider(t *testing.T) {
	tr, err := Setup(context.Background(), ServiceAPI, env(nil))
	require.NoError(t, err)
	require.False(t, tr.Enabled())
	tp := tr.TracerProvider()
	require.IsType(t, noop.TracerProvider{}, tp)
	require.False(t, On(tp))
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	require.False(t, span.IsRecording())
	require.False(t, span.SpanContext().IsValid())
	require.Nil(t, RiverMiddleware(tp))
	require.NoError(t, tr.Shutdown(context.Background()))
}

func TestMetricsOnTellsANoOpProvider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mp   metric.MeterProvider
		on   bool
	}{
		{"Nil", nil, false},
		{"NoOp", metricnoop.NewMeterProvider(), false},
		{"NoOpPointer", &metricnoop.MeterProvider{}, false},
		{"SDK", sdkmetric.NewMeterProvider(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.on, MetricsOn(tc.mp))
		})
	}
}

func TestEnabledReadsTheStandardVariables(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		on   bool
		err  string
	}{
		{"unset", nil, false, ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, ""},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, false, ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"other exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"http", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, err := enabled(env(tc.vars))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.on, on)
		})
	}
}

func TestSetupOnExportsOverOTLPHTTP(t *testing.T) {
	// Nothing listens there; no span is made, so nothing is sent.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tr, err := Setup(context.Background(), ServiceWorker, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}))
	require.NoError(t, err)
	require.True(t, tr.Enabled())
	require.True(t, On(tr.TracerProvider()))
	require.Len(t, RiverMiddleware(tr.TracerProvider()), 2)
	require.NoError(t, tr.Shutdown(context.Background()))
}

func TestServiceNameDefaultsAndEnvironmentWins(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	res, err := newResource(context.Background(), ServiceWorker)
	require.NoError(t, err)
	name, _ := res.Set().Value(attribute.Key("service.name"))
	require.Equal(t, ServiceWorker, name.AsString())

	t.Setenv("OTEL_SERVICE_NAME", "billing-worker")
	res, err = newResource(context.Background(), ServiceWorker)
	require.NoError(t, err)
	name, _ = res.Set().Value(attribute.Key("service.name"))
	require.Equal(t, "billing-worker", name.AsString())
}

func TestLogHandlerAddsTheSpansIDs(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("k", "v")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()

	logger.InfoContext(ctx, "with span")
	logger.Info("without context")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var with, without map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &with))
	require.NoError(t, json.Unmarshal(lines[1], &without))
	require.Equal(t, span.SpanContext().TraceID().String(), with["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), with["span_id"])
	require.Equal(t, "v", with["k"])
	require.NotContains(t, without, "trace_id")
}

func TestJobParentContinuesTheInsertingTrace(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	_, span := tp.Tracer("t").Start(context.Background(), "insert")
	defer span.End()
	sc := span.SpanContext()
	meta := []byte(`{"traceparent":"00-` + sc.TraceID().String() + `-` + sc.SpanID().String() + `-01","other":1}`)

	var (
		got   trace.SpanContext
		gotID string
	)
	err := (&jobParent{}).Work(context.Background(), &rivertype.JobRow{Metadata: meta}, func(ctx context.Context) error {
		got, gotID = trace.SpanContextFromContext(ctx), TraceID(ctx)
		return nil
	})
	require.NoError(t, err)
	require.True(t, got.IsRemote())
	require.Equal(t, sc.TraceID(), got.TraceID())
	require.Equal(t, sc.SpanID(), got.SpanID())
	require.Equal(t, sc.TraceID().String(), gotID)

	err = (&jobParent{}).Work(context.Background(), &rivertype.JobRow{Metadata: []byte(`{}`)}, func(ctx context.Context) error {
		require.False(t, trace.SpanContextFromContext(ctx).IsValid())
		return nil
	})
	require.NoError(t, err)
}

func TestTracerOffKeepsTheCurrentSpan(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	defer parent.End()

	got, span := NewTracer(nil, "off").Start(ctx, "child")
	require.False(t, span.IsRecording())
	require.Equal(t, parent.SpanContext(), trace.SpanContextFromContext(got))

	got, span = NewTracer(tp, "on").Start(ctx, "child")
	defer span.End()
	require.True(t, span.IsRecording())
	require.Equal(t, parent.SpanContext().TraceID(), trace.SpanContextFromContext(got).TraceID())
	require.NotEqual(t, parent.SpanContext().SpanID(), trace.SpanContextFromContext(got).SpanID())
}
