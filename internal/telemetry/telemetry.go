// Package telemetry sets up idemgate's OpenTelemetry traces from the
// standard OTEL_* variables, and holds the small pieces the other packages
// share: the on/off test of a TracerProvider, the River middleware that
// carries a trace into a job, and the slog handler that adds trace ids to
// log lines.
//
// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER=otlp is set;
// off means no exporter, a no-op TracerProvider and no middleware.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Default service names, when OTEL_SERVICE_NAME is unset.
const (
	ServiceAPI    = "idemgate-api"
	ServiceWorker = "idemgate-worker"
)

// Traces is a process's tracing: where its spans go, and the exporter to
// flush when it stops.
type Traces struct {
	sdk *sdktrace.TracerProvider // nil when off
}

// Setup reads the OTEL_* variables through getenv (os.Getenv in the
// binaries). Off, it returns Traces with a no-op provider and no exporter;
// on, an OTLP/HTTP exporter (which reads the OTEL_EXPORTER_OTLP_*
// variables itself) behind a batching processor, with service as the
// service name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names
// one. Call Shutdown when the process stops.
func Setup(ctx context.Context, service string, getenv func(string) string) (*Traces, error) {
	on, err := enabled(getenv)
	if err != nil || !on {
		return &Traces{}, err
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_*: %w", err)
	}
	res, err := newResource(ctx, service)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (default: parent-based,
	// always on), the batching from OTEL_BSP_*.
	return &Traces{sdk: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))}, nil
}

// newResource names the service: service, unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES names it.
func newResource(ctx context.Context, service string) (*resource.Resource, error) {
	return resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), // later detectors win
		resource.WithTelemetrySDK(),
	)
}

// enabled says whether the variables ask for traces: an OTLP endpoint or
// OTEL_TRACES_EXPORTER=otlp, and neither OTEL_TRACES_EXPORTER=none nor
// OTEL_SDK_DISABLED=true. Other exporters and protocols are refused.
func enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case "", "otlp":
	case "none":
		return false, nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp or none is supported", exporter)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: only http/protobuf is supported", protocol)
	}
	return exporter == "otlp" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
}

// Enabled reports whether spans are exported.
func (t *Traces) Enabled() bool { return t.sdk != nil }

// TracerProvider is where the process's spans go: a no-op provider when
// tracing is off.
func (t *Traces) TracerProvider() trace.TracerProvider {
	if t.sdk == nil {
		return noop.NewTracerProvider()
	}
	return t.sdk
}

// Shutdown flushes the spans not yet exported and stops the exporter,
// within ctx. It does nothing when tracing is off.
func (t *Traces) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	err := t.sdk.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("telemetry: spans not flushed in time: %w", err)
	}
	return err
}

// On reports whether tp records spans: false for nil and for a no-op
// provider, which idemgate's packages take as "no spans, no middleware".
func On(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return false
	}
	return true
}

// MetricsOn reports whether mp records measurements: false for nil and for
// a no-op provider, which the api takes as "no OpenTelemetry metrics".
func MetricsOn(mp metric.MeterProvider) bool {
	switch mp.(type) {
	case nil, metricnoop.MeterProvider, *metricnoop.MeterProvider:
		return false
	}
	return true
}

// Tracer starts spans on a provider that is on, and none on one that is
// off: then Start returns ctx as it is, so a span already in it stays the
// current one.
type Tracer struct {
	tracer trace.Tracer // nil when off
}

// NewTracer returns tp's tracer named name.
func NewTracer(tp trace.TracerProvider, name string) Tracer {
	if !On(tp) {
		return Tracer{}
	}
	return Tracer{tracer: tp.Tracer(name)}
}

// Start starts a span named name, or returns ctx and a no-op span.
func (t Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.tracer == nil {
		return ctx, noop.Span{}
	}
	return t.tracer.Start(ctx, name, opts...)
}

// TraceID is the hex trace id of ctx's span, or "" when it has none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}
