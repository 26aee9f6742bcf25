package api

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace/noop"
)

// The names mcpconv.go defines are the conventions' of semconv v1.41.0,
// the last release of the otel module that carries them.
func TestMCPConventionNamesAreSemconvs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ours, theirs attribute.Key }{
		{attrMCPMethodName, semconv.McpMethodNameKey},
		{attrMCPProtocolVersion, semconv.McpProtocolVersionKey},
		{attrJSONRPCRequestID, semconv.JSONRPCRequestIDKey},
		{attrGenAIToolName, semconv.GenAIToolNameKey},
		{attrGenAIOperationName, semconv.GenAIOperationNameKey},
		{attrErrorType, semconv.ErrorTypeKey},
		{attrRPCResponseStatusCode, semconv.RPCResponseStatusCodeKey},
		{attrNetworkTransport, semconv.NetworkTransportKey},
		{attrNetworkProtocolName, semconv.NetworkProtocolNameKey},
		{attrNetworkProtocolVersion, semconv.NetworkProtocolVersionKey},
	} {
		require.Equal(t, tc.theirs, tc.ours)
	}
	require.Equal(t, semconv.GenAIOperationNameExecuteTool, attrGenAIOperationName.String(operationExecuteTool))
	require.Equal(t, string(mcpconv.ErrorTypeOther), errorTypeOther)
	require.Equal(t, mcpconv.ServerOperationDuration{}.Name(), metricServerDuration)
	require.Equal(t, mcpconv.ServerOperationDuration{}.Unit(), "s")
}

// Off (nil or no-op providers), there is no recorder and singleCall
// records nothing.
func TestMCPTelemetryOffIsNil(t *testing.T) {
	t.Parallel()
	tel, err := newMCPTelemetry(nil, nil, nil, nil)
	require.NoError(t, err)
	require.Nil(t, tel)
	tel, err = newMCPTelemetry(noop.NewTracerProvider(), metricnoop.NewMeterProvider(), nil, nil)
	require.NoError(t, err)
	require.Nil(t, tel)
	call, _ := tel.start(nil, &envelope{method: methodToolsCall, hasMethod: true})
	require.Nil(t, call)
}
