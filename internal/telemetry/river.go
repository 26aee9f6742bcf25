package telemetry

import (
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// RiverMiddleware is the River middleware of a traced client, nil when tp
// is off. otelriver writes the inserting span's traceparent into the job's
// metadata (span river.insert_many) and wraps each job in a consumer span
// (river.work/KIND) linked to it; jobParent, before it, makes that span a
// child of the inserting span too, so that a call and its job share one
// trace.
func RiverMiddleware(tp trace.TracerProvider) []rivertype.Middleware {
	if !On(tp) {
		return nil
	}
	return []rivertype.Middleware{
		&jobParent{},
		otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider:              tp,
			MeterProvider:               metricnoop.NewMeterProvider(), // metrics are Prometheus's
			EnableTracePropagation:      true,
			EnableWorkSpanJobKindSuffix: true,
		}),
	}
}

// jobParent puts the trace context a job was inserted with into the
// context it is worked with, as the remote parent of the spans started
// there.
type jobParent struct {
	river.MiddlewareDefaults
}

// Work implements rivertype.WorkerMiddleware.
func (*jobParent) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	var meta struct {
		TraceParent string `json:"traceparent"`
		TraceState  string `json:"tracestate"`
	}
	if json.Unmarshal(job.Metadata, &meta) == nil && meta.TraceParent != "" {
		carrier := propagation.MapCarrier{"traceparent": meta.TraceParent, "tracestate": meta.TraceState}
		ctx = propagation.TraceContext{}.Extract(ctx, carrier)
	}
	return doInner(ctx)
}
