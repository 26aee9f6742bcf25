package api

import "go.opentelemetry.io/otel/attribute"

// The names of OpenTelemetry's semantic conventions for MCP servers
// (open-telemetry/semantic-conventions-genai, docs/gen-ai/mcp.md,
// Development status). They are defined here rather than imported: the
// otel module carries them in semconv/v1.39.0 to v1.41.0 only (mcpconv,
// genaiconv), and mcpconv_internal_test.go holds them to v1.41.0's.
const (
	attrMCPMethodName          = attribute.Key("mcp.method.name")
	attrMCPProtocolVersion     = attribute.Key("mcp.protocol.version")
	attrJSONRPCRequestID       = attribute.Key("jsonrpc.request.id")
	attrGenAIToolName          = attribute.Key("gen_ai.tool.name")
	attrGenAIOperationName     = attribute.Key("gen_ai.operation.name")
	attrErrorType              = attribute.Key("error.type")
	attrRPCResponseStatusCode  = attribute.Key("rpc.response.status_code")
	attrNetworkTransport       = attribute.Key("network.transport")
	attrNetworkProtocolName    = attribute.Key("network.protocol.name")
	attrNetworkProtocolVersion = attribute.Key("network.protocol.version")

	// operationExecuteTool is gen_ai.operation.name of a tools/call.
	operationExecuteTool = "execute_tool"
	// errorTypeTool is error.type of a tools/call answered with isError.
	errorTypeTool = "tool_error"
	// errorTypeOther is error.type of a failure of no known class, and
	// mcp.method.name of a method the server does not serve.
	errorTypeOther = "_OTHER"

	// metricServerDuration is the server's histogram of MCP requests and
	// notifications, in seconds, from the request read to the answer
	// written.
	metricServerDuration = "mcp.server.operation.duration"
)

// serverDurationBuckets are the conventions' advised bucket boundaries of
// metricServerDuration, in seconds.
var serverDurationBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
