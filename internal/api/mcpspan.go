package api

// MCP server spans and the mcp.server.operation.duration histogram, after
// OpenTelemetry's MCP semantic conventions (names in mcpconv.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/telemetry"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// mcpTelemetry records one server span and one duration per MCP request or
// notification that singleCall reads, whichever path answers it (the fast
// path or the SDK) and in every revision. It is nil when both tracing and
// metrics are off, and then costs nothing.
//
// The span is a child of the request's HTTP span (the ambient context),
// so that the call, its gate.claim and its job are one trace, filed under
// a trace id the caller did not choose. A traceparent in params._meta (the
// conventions' propagation) is linked, as the HTTP traceparent is. There is
// no mcp.session.id: the api is sessionless.
type mcpTelemetry struct {
	tracer   trace.Tracer            // nil when tracing is off
	duration metric.Float64Histogram // nil when metrics are off
	// methods are the methods served (Server.methods); any other is
	// recorded as _OTHER, so that a client mints no span names or series.
	methods map[string]int
	// tools are the api's tools. A call naming another tool keeps its
	// name only when it was answered with a result (the tool exists, an
	// embedder's own tool under MCPFor).
	tools map[string]bool
}

// newMCPTelemetry returns the recorder, or nil when tp and mp are both off.
func newMCPTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, methods map[string]int, tools []*toolspec.Spec) (*mcpTelemetry, error) {
	t := &mcpTelemetry{methods: methods, tools: make(map[string]bool, len(tools))}
	for _, spec := range tools {
		t.tools[spec.Name] = true
	}
	const scope = "github.com/idemgate/idemgate/internal/api"
	if telemetry.On(tp) {
		t.tracer = tp.Tracer(scope)
	}
	if telemetry.MetricsOn(mp) {
		h, err := mp.Meter(scope).Float64Histogram(metricServerDuration,
			metric.WithUnit("s"),
			metric.WithDescription("MCP request or notification duration as observed on the receiver from the time it was received until the result or ack is sent."),
			metric.WithExplicitBucketBoundaries(serverDurationBuckets...))
		if err != nil {
			return nil, err
		}
		t.duration = h
	}
	if t.tracer == nil && t.duration == nil {
		return nil, nil
	}
	return t, nil
}

// mcpCall is one message being served.
type mcpCall struct {
	ctx   context.Context
	start time.Time
	span  trace.Span // nil when tracing is off
	// common are the attributes of the span and the metric known when the
	// message is read.
	common []attribute.KeyValue
	method string
	// tool is params.name of a tools/call; named says whether it is in
	// the span's name already.
	tool  string
	named bool
	tel   *mcpTelemetry

	// The outcome: answered is set once it is known (the fast path tells
	// it; otherwise the answer is read when it is written).
	answered  bool
	result    bool // answered with a result, not a JSON-RPC error
	errorType string
	rpcCode   string
	message   string
	version   string // the negotiated version of an initialize answer
}

type mcpCallKey struct{}

// mcpCallFrom is the call being served in ctx, or nil when there is none.
func mcpCallFrom(ctx context.Context) *mcpCall {
	c, _ := ctx.Value(mcpCallKey{}).(*mcpCall)
	return c
}

// start begins recording env, a message of r, and returns the call and r
// with its span (nil and r as it is when recording is off or env is a
// response).
func (t *mcpTelemetry) start(r *http.Request, env *envelope) (*mcpCall, *http.Request) {
	if t == nil || env == nil || !env.hasMethod {
		return nil, r
	}
	c := &mcpCall{start: time.Now(), method: env.method, tel: t}
	if _, ok := t.methods[env.method]; !ok {
		c.method = errorTypeOther
	}
	var meta []byte
	if env.method == methodToolsCall && env.call != nil {
		c.tool, meta = env.call.name, env.call.meta
	} else {
		meta = member(env.params, "_meta")
	}
	c.common = append(make([]attribute.KeyValue, 0, 10), attrMCPMethodName.String(c.method),
		attrNetworkTransport.String("tcp"), attrNetworkProtocolName.String("http"),
		attrNetworkProtocolVersion.String(protoVersion(r)))
	if v := requestVersion(r, env, meta); v != "" {
		c.common = append(c.common, attrMCPProtocolVersion.String(v))
	}
	if env.method == methodToolsCall {
		c.common = append(c.common, attrGenAIOperationName.String(operationExecuteTool))
	}
	ctx := r.Context()
	if t.tracer != nil {
		attrs := c.common
		if id, ok := jsonrpcID(env.id); ok {
			attrs = append(attrs[:len(attrs):len(attrs)], attrJSONRPCRequestID.String(id))
		}
		name := c.method
		if c.tool != "" && t.tools[c.tool] {
			name += " " + c.tool
			c.named = true
			attrs = append(attrs[:len(attrs):len(attrs)], attrGenAIToolName.String(c.tool))
		}
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
		if link, ok := metaLink(meta); ok {
			opts = append(opts, trace.WithLinks(link))
		}
		ctx, c.span = t.tracer.Start(ctx, name, opts...)
	}
	c.ctx = context.WithValue(ctx, mcpCallKey{}, c)
	return c, r.WithContext(c.ctx)
}

// toolResult records a tools/call answered with a result (the fast path).
func (c *mcpCall) toolResult(isError bool) {
	if c == nil {
		return
	}
	c.answered, c.result = true, true
	if isError {
		c.errorType = errorTypeTool
	}
}

// rpcError records a JSON-RPC error answer (the fast path).
func (c *mcpCall) rpcError(e *jsonrpc.Error) {
	if c == nil {
		return
	}
	c.answered, c.result = true, false
	c.rpcCode = strconv.FormatInt(e.Code, 10)
	c.errorType, c.message = c.rpcCode, e.Message
}

// maxAnswerRead bounds the answer kept to read its outcome; a longer one
// is recorded without it.
const maxAnswerRead = 4 << 20

// readAnswer reads the outcome from the answer written: a JSON-RPC error's
// code, a result's isError (tool_error), an initialize answer's version,
// or else an HTTP error status.
func (c *mcpCall) readAnswer(status int, body []byte) {
	var msg struct {
		Result *struct {
			IsError         bool   `json:"isError"`
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
		Error *jsonrpc.Error `json:"error"`
	}
	switch {
	case len(body) > 0 && len(body) < maxAnswerRead && json.Unmarshal(body, &msg) == nil && msg.Error != nil:
		c.rpcError(msg.Error)
	case msg.Result != nil:
		c.result = true
		if msg.Result.IsError {
			c.errorType = errorTypeTool
		}
		if c.method == methodInitialize && knownVersion(msg.Result.ProtocolVersion) {
			c.version = msg.Result.ProtocolVersion
		}
	case status >= 400:
		c.errorType = strconv.Itoa(status)
	}
}

// end records the call's span and duration once its answer is written.
func (c *mcpCall) end(w *mcpWriter) {
	if !c.answered {
		c.readAnswer(w.status, w.body.Bytes())
	}
	elapsed := time.Since(c.start)
	attrs := c.common
	if c.version != "" {
		attrs = append(attrs[:len(attrs):len(attrs)], attrMCPProtocolVersion.String(c.version))
	}
	showTool := c.tool != "" && (c.named || c.result)
	if showTool {
		attrs = append(attrs[:len(attrs):len(attrs)], attrGenAIToolName.String(c.tool))
	}
	if c.errorType != "" {
		attrs = append(attrs[:len(attrs):len(attrs)], attrErrorType.String(c.errorType))
	}
	if c.rpcCode != "" {
		attrs = append(attrs[:len(attrs):len(attrs)], attrRPCResponseStatusCode.String(c.rpcCode))
	}
	if c.span != nil {
		if showTool && !c.named {
			c.span.SetName(c.method + " " + c.tool)
		}
		c.span.SetAttributes(attrs[len(c.common):]...)
		if c.errorType != "" {
			c.span.SetStatus(codes.Error, c.message)
		}
		c.span.End()
	}
	if h := c.tel.duration; h != nil {
		h.Record(c.ctx, elapsed.Seconds(), metric.WithAttributeSet(attribute.NewSet(attrs...)))
	}
}

// mcpWriter keeps the status and the answer of a call, for its outcome,
// unless the outcome is known before it is written.
type mcpWriter struct {
	http.ResponseWriter
	call   *mcpCall
	status int
	body   bytes.Buffer
}

func (w *mcpWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *mcpWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.call.answered && w.body.Len() < maxAnswerRead {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the answer, as the writer it wraps does.
func (w *mcpWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (w *mcpWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestVersion is the message's MCP protocol version: the
// Mcp-Protocol-Version header, else the version in params._meta
// (2026-07-28) or an initialize request's; "" for none or one the api
// does not serve.
func requestVersion(r *http.Request, env *envelope, meta []byte) string {
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" {
		if knownVersion(v) {
			return v
		}
		return ""
	}
	v, _ := jsonString(member(meta, metaProtocolVersion))
	if v == "" && env.method == methodInitialize {
		v, _ = jsonString(member(env.params, "protocolVersion"))
	}
	if knownVersion(v) {
		return v
	}
	return ""
}

// knownVersion reports whether v is a protocol version the api serves.
func knownVersion(v string) bool {
	return v != "" && (v == mcpVersionStateless || isLegacyVersion(v))
}

// protoVersion is network.protocol.version of r: "1.1", "2".
func protoVersion(r *http.Request) string {
	if r.ProtoMinor == 0 && r.ProtoMajor > 1 {
		return strconv.Itoa(r.ProtoMajor)
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

// jsonrpcID is jsonrpc.request.id of a raw id: a string's value or a
// number's text; false for null or none.
func jsonrpcID(raw []byte) (string, bool) {
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", false
	case raw[0] == '"':
		return jsonString(raw)
	}
	return string(raw), true
}

// member is the raw value of the member name of the JSON object obj, or
// nil when obj is not an object or has no such member.
func member(obj []byte, name string) []byte {
	if len(obj) == 0 || obj[0] != '{' {
		return nil
	}
	var val []byte
	_, _ = eachMember(obj, 0, jsonrpc.CodeInvalidParams, func(n []byte, _ bool, v []byte) *envelopeError {
		if val == nil && string(n) == name {
			val = v
		}
		return nil
	})
	return val
}

// metaLink is the link to the W3C trace context in params._meta
// (traceparent, tracestate), when it carries a valid one.
func metaLink(meta []byte) (trace.Link, bool) {
	parent, _ := jsonString(member(meta, "traceparent"))
	if parent == "" {
		return trace.Link{}, false
	}
	state, _ := jsonString(member(meta, "tracestate"))
	carrier := propagation.MapCarrier{"traceparent": parent}
	if state != "" {
		carrier["tracestate"] = state
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc}, true
}
