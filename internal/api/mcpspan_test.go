package api_test

// The MCP server spans and the mcp.server.operation.duration histogram of
// OpenTelemetry's MCP conventions, read from an in-memory span recorder
// and a manual metric reader, on both paths (the fast path and the SDK)
// and both revisions (2025-11-25, 2026-07-28).

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/tools"
)

// otelServer is an api with its own gate, spans and metrics.
type otelServer struct {
	srv     *httptest.Server
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
	// prom counts the requests the fast path served.
	prom *prometheus.Registry
}

// otelSetup starts two traced and metered apis on one database: the fast
// path's and the SDK's (Config.SDKOnlyMCP). Each has its own app, so that
// its gate's spans go to its own recorder.
func otelSetup(t *testing.T) (fast, sdk *otelServer) {
	t.Helper()
	ctx := context.Background()
	dbURL, pool := pgtest.NewDB(t)
	data := pgengine.New(pool)
	_, err := data.Seed(ctx, &store.SeedFile{
		Rows: &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}}},
		Tokens: []store.SeedToken{{Tenant: "acme", User: "otel",
			Scopes: []string{"billing:refund", "billing:credit", "seats:reset", "users:password_reset", "operations:read"}, Token: fuzzTokenAll}},
	})
	require.NoError(t, err)
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	discard := slog.New(slog.DiscardHandler)
	servers := make([]*otelServer, 2)
	for i, sdkOnly := range []bool{false, true} {
		s := &otelServer{spans: tracetest.NewSpanRecorder(), metrics: sdkmetric.NewManualReader(), prom: prometheus.NewRegistry()}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
		a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(pool, cfg.Pooled()), discard, &app.APIOptions{RateLimit: -1, TracerProvider: tp})
		require.NoError(t, err)
		srv, err := api.New(&api.Config{
			Gate:           a.Gate,
			Auth:           tenancy.NewAuthenticator(data, tenancy.DefaultTokenCacheTTL, time.Now),
			Tools:          a.Tools,
			Jobs:           a.Jobs,
			RateLimit:      -1,
			Logger:         discard,
			Registerer:     s.prom,
			SDKOnlyMCP:     sdkOnly,
			TracerProvider: tp,
			MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.metrics)),
		})
		require.NoError(t, err)
		s.srv = httptest.NewServer(srv)
		t.Cleanup(s.srv.Close)
		servers[i] = s
	}
	return servers[0], servers[1]
}

// fastCalls is the count of requests the fast path served.
func (s *otelServer) fastCalls(t *testing.T) float64 {
	t.Helper()
	return (&mcpPair{metrics: s.prom}).fastCalls(t)
}

// span waits for the one ended span that match accepts (a span ends just
// after its answer is written; the bound only stops a broken test).
func (s *otelServer) span(t *testing.T, what string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		found = found[:0]
		for _, sp := range s.spans.Ended() {
			if match(sp) {
				found = append(found, sp)
			}
		}
		return len(found) > 0
	}, 30*time.Second, 10*time.Millisecond, "no span: %s", what)
	require.Len(t, found, 1, "spans: %s", what)
	return found[0]
}

// spanByID is the ended span with this id.
func (s *otelServer) spanByID(t *testing.T, id trace.SpanID) sdktrace.ReadOnlySpan {
	t.Helper()
	return s.span(t, "span "+id.String(), func(sp sdktrace.ReadOnlySpan) bool { return sp.SpanContext().SpanID() == id })
}

// attrsOf are a span's attributes by key.
func attrsOf(sp sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range sp.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// hasAttrs reports whether sp has every attribute of want.
func hasAttrs(sp sdktrace.ReadOnlySpan, want map[attribute.Key]string) bool {
	got := attrsOf(sp)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// connectOTel connects the go-sdk client to s speaking version.
func connectOTel(t *testing.T, s *otelServer, version string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "otel-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   s.srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRoundTripper{fuzzTokenAll}, Timeout: 30 * time.Second},
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

type bearerRoundTripper struct{ token string }

func (b bearerRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// durationPoints are the data points of mcp.server.operation.duration, by
// their attribute set.
func durationPoints(t *testing.T, s *otelServer) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.metrics.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "mcp.server.operation.duration" {
				continue
			}
			require.Equal(t, "s", m.Unit)
			h, ok := m.Data.(metricdata.Histogram[float64])
			require.True(t, ok, "a float64 histogram: %T", m.Data)
			return h.DataPoints
		}
	}
	t.Fatal("no mcp.server.operation.duration")
	return nil
}

// durationCount is the count of the data point with exactly attrs.
func durationCount(t *testing.T, s *otelServer, attrs ...attribute.KeyValue) uint64 {
	t.Helper()
	want := attribute.NewSet(attrs...)
	var n uint64
	for _, dp := range durationPoints(t, s) {
		if dp.Attributes.Equals(&want) {
			n += dp.Count
			require.Equal(t, []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}, dp.Bounds)
		}
	}
	return n
}

// TestMCPToolCallSpansFollowTheConventions calls a tool with the go-sdk
// client, on both paths and both revisions: one accepted call and one
// answered with isError. Each is a server span "tools/call refund_order"
// inside the request's HTTP span, with the conventions' attributes, and
// the parent of the call's gate.claim; the isError call has
// error.type=tool_error; each is one measurement of
// mcp.server.operation.duration.
func TestMCPToolCallSpansFollowTheConventions(t *testing.T) {
	t.Parallel()
	fast, sdk := otelSetup(t)
	for _, tc := range []struct {
		name string
		s    *otelServer
		fast bool
	}{{"FastPath", fast, true}, {"SDK", sdk, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i, version := range []string{"2025-11-25", "2026-07-28"} {
				cs := connectOTel(t, tc.s, version)
				before := tc.s.fastCalls(t)
				key := "otel-" + strings.ToLower(tc.name) + "-" + version
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
					// An amount of each call's own: the same refund under
					// another key would be held as a possible duplicate.
					Arguments: map[string]any{"order_id": "ord_9f2", "amount_cents": 100 + 10*i + len(tc.name), "idempotency_key": key}})
				require.NoError(t, err)
				require.False(t, res.IsError, "%v", res.Content)
				bad, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order",
					Arguments: map[string]any{"order_id": "ord_9f2", "amount_cents": -5, "idempotency_key": key + "-bad"}})
				require.NoError(t, err)
				require.True(t, bad.IsError)
				if tc.fast {
					require.Equal(t, before+2, tc.s.fastCalls(t), "the fast path served both calls")
				} else {
					require.Zero(t, tc.s.fastCalls(t))
				}

				common := map[attribute.Key]string{
					"mcp.method.name":       "tools/call",
					"mcp.protocol.version":  version,
					"gen_ai.tool.name":      "refund_order",
					"gen_ai.operation.name": "execute_tool",
					"network.transport":     "tcp",
					"network.protocol.name": "http",
				}
				// The accepted call: the MCP span is the claim's parent.
				claim := tc.s.span(t, "gate.claim "+key, func(sp sdktrace.ReadOnlySpan) bool {
					return sp.Name() == "gate.claim" && hasAttrs(sp, map[attribute.Key]string{"idemgate.idempotency_key": key})
				})
				call := tc.s.spanByID(t, claim.Parent().SpanID())
				require.Equal(t, "tools/call refund_order", call.Name())
				require.Equal(t, trace.SpanKindServer, call.SpanKind())
				require.True(t, hasAttrs(call, common), "%v", attrsOf(call))
				attrs := attrsOf(call)
				require.NotEmpty(t, attrs["jsonrpc.request.id"])
				require.NotContains(t, attrs, attribute.Key("error.type"))
				require.NotContains(t, attrs, attribute.Key("mcp.session.id"), "sessionless")
				require.Equal(t, codes.Unset, call.Status().Code)
				request := tc.s.spanByID(t, call.Parent().SpanID())
				require.Equal(t, "POST /mcp", request.Name())
				require.Equal(t, call.SpanContext().TraceID(), claim.SpanContext().TraceID())

				// The isError call.
				withError := map[attribute.Key]string{"error.type": "tool_error"}
				for k, v := range common {
					withError[k] = v
				}
				failed := tc.s.span(t, "tool_error "+version, func(sp sdktrace.ReadOnlySpan) bool { return hasAttrs(sp, withError) })
				require.Equal(t, "tools/call refund_order", failed.Name())
				require.Equal(t, trace.SpanKindServer, failed.SpanKind())
				require.Equal(t, codes.Error, failed.Status().Code)
				require.NotEqual(t, attrs["jsonrpc.request.id"], attrsOf(failed)["jsonrpc.request.id"])

				metricAttrs := []attribute.KeyValue{
					attribute.String("mcp.method.name", "tools/call"),
					attribute.String("mcp.protocol.version", version),
					attribute.String("gen_ai.tool.name", "refund_order"),
					attribute.String("gen_ai.operation.name", "execute_tool"),
					attribute.String("network.transport", "tcp"),
					attribute.String("network.protocol.name", "http"),
					attribute.String("network.protocol.version", "1.1"),
				}
				require.EqualValues(t, 1, durationCount(t, tc.s, metricAttrs...), "the accepted call")
				require.EqualValues(t, 1, durationCount(t, tc.s, append(metricAttrs, attribute.String("error.type", "tool_error"))...), "the isError call")
			}
		})
	}
}

// TestMCPSpansOfOtherAnswers sends raw JSON-RPC: an unknown tool (a
// protocol error: error.type is its code, no tool name in the span's
// name), tools/list, an unknown method (_OTHER), a notification (no
// request id), and a call whose params._meta carries a traceparent, which
// is linked, not made the parent.
func TestMCPSpansOfOtherAnswers(t *testing.T) {
	t.Parallel()
	fast, sdk := otelSetup(t)
	for _, tc := range []struct {
		name string
		s    *otelServer
	}{{"FastPath", fast}, {"SDK", sdk}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &mcpPair{}
			send := func(body string) mcpAnswer {
				return p.send(t, tc.s.srv, mcpRequest{header: legacy, body: body})
			}
			byID := func(id string) sdktrace.ReadOnlySpan {
				return tc.s.span(t, "request "+id, func(sp sdktrace.ReadOnlySpan) bool {
					return hasAttrs(sp, map[attribute.Key]string{"jsonrpc.request.id": id})
				})
			}

			a := send(call(`"unknown-1"`, "no_such_tool", `{}`, false))
			require.Contains(t, a.body, `"code":-32602`)
			sp := byID("unknown-1")
			require.Equal(t, "tools/call", sp.Name())
			require.True(t, hasAttrs(sp, map[attribute.Key]string{"mcp.method.name": "tools/call", "error.type": "-32602",
				"rpc.response.status_code": "-32602", "mcp.protocol.version": "2025-11-25", "gen_ai.operation.name": "execute_tool"}), "%v", attrsOf(sp))
			require.NotContains(t, attrsOf(sp), attribute.Key("gen_ai.tool.name"), "a name the server does not serve")
			require.Equal(t, codes.Error, sp.Status().Code)
			require.Equal(t, `unknown tool "no_such_tool"`, sp.Status().Description)

			send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			sp = byID("2")
			require.Equal(t, "tools/list", sp.Name())
			require.Equal(t, trace.SpanKindServer, sp.SpanKind())
			require.NotContains(t, attrsOf(sp), attribute.Key("gen_ai.operation.name"))
			require.NotContains(t, attrsOf(sp), attribute.Key("error.type"))

			a = send(`{"jsonrpc":"2.0","id":"odd-3","method":"no/such/method"}`)
			require.Contains(t, a.body, `"code":-32601`)
			sp = byID("odd-3")
			require.Equal(t, "_OTHER", sp.Name(), "a client mints no span names")
			require.True(t, hasAttrs(sp, map[attribute.Key]string{"mcp.method.name": "_OTHER", "error.type": "-32601"}))

			a = send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			require.Equal(t, http.StatusAccepted, a.status)
			sp = tc.s.span(t, "notification", func(sp sdktrace.ReadOnlySpan) bool { return sp.Name() == "notifications/initialized" })
			require.NotContains(t, attrsOf(sp), attribute.Key("jsonrpc.request.id"))
			require.NotContains(t, attrsOf(sp), attribute.Key("error.type"))

			const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			send(`{"jsonrpc":"2.0","id":"linked-4","method":"tools/call","params":{"_meta":{"traceparent":"` + traceparent +
				`","tracestate":"rojo=00f067aa0ba902b7"},"name":"get_operation","arguments":{"tool":"refund_order","idempotency_key":"no-such-key-01"}}}`)
			sp = byID("linked-4")
			require.Equal(t, "tools/call get_operation", sp.Name())
			require.Len(t, sp.Links(), 1)
			link := sp.Links()[0].SpanContext
			require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", link.TraceID().String())
			require.Equal(t, "00f067aa0ba902b7", link.SpanID().String())
			require.Equal(t, "rojo=00f067aa0ba902b7", link.TraceState().String())
			require.NotEqual(t, link.TraceID(), sp.SpanContext().TraceID(), "the caller does not choose our trace")
			require.Equal(t, "POST /mcp", tc.s.spanByID(t, sp.Parent().SpanID()).Name())

			require.EqualValues(t, 1, durationCount(t, tc.s,
				attribute.String("mcp.method.name", "tools/call"),
				attribute.String("mcp.protocol.version", "2025-11-25"),
				attribute.String("gen_ai.operation.name", "execute_tool"),
				attribute.String("error.type", "-32602"),
				attribute.String("rpc.response.status_code", "-32602"),
				attribute.String("network.transport", "tcp"),
				attribute.String("network.protocol.name", "http"),
				attribute.String("network.protocol.version", "1.1"),
			), "the unknown tool, without its name")
		})
	}
}
