package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/internal/vocab"
)

// Version is the server version announced to MCP clients.
const Version = "0.1.0"

// mcpHandler builds the MCP server with every tool and serves it over
// Streamable HTTP in stateless mode, so any api replica can answer any call,
// behind singleCall (which reads the envelope, envelope.go) and the task
// layer; the fast path (mcpfast.go) answers plain tool calls itself.
func (s *Server) mcpHandler() (http.Handler, error) {
	impl := &mcp.Implementation{Name: "idemgate", Title: "idemgate", Version: Version}
	server := mcp.NewServer(impl, &mcp.ServerOptions{
		Instructions: "Mutating tools take an idempotency_key: reuse it when you retry the same intent, " +
			"never for a different one. An in_flight answer carries the operation handle: poll get_operation, " +
			"or call the tool as an MCP task (the task id is the operation id; the same key is the same task).",
		// The tool list never changes while the server runs. The SDK
		// answers prompts/list and resources/list (empty lists, no
		// subscriptions) whatever is declared; a server MUST declare what
		// it serves (2026-07-28's server/discover as initialize), so the
		// two capabilities say so, without listChanged.
		Capabilities: &mcp.ServerCapabilities{
			Tools:     &mcp.ToolCapabilities{ListChanged: false},
			Prompts:   &mcp.PromptCapabilities{ListChanged: false},
			Resources: &mcp.ResourceCapabilities{ListChanged: false},
		},
	})
	fastTools, schemas, err := s.addTools(server)
	if err != nil {
		return nil, err
	}
	var fast *fastPath
	if !s.sdkOnlyMCP {
		fast = newFastPath(impl, fastTools, schemas, s.logger)
	}
	return s.serveMCP(server, fast), nil
}

// MCPFor adds every tool (the registry's and the built-in reads), the task
// methods and the task middleware to a server of the embedder's own, and
// returns the handler that serves it as the api serves its own: Streamable
// HTTP, stateless, behind the envelope checks and the task layer, with
// authentication and the Origin check in front (Wrap). The server's own
// tools are served beside ours, authenticated alike.
func (s *Server) MCPFor(server *mcp.Server) (http.Handler, error) {
	if server == nil {
		return nil, errors.New("api: MCPFor needs a server")
	}
	if _, _, err := s.addTools(server); err != nil {
		return nil, err
	}
	return s.Wrap(s.serveMCP(server, nil)), nil
}

// addTools adds every tool, the task methods and the receiving middleware
// to server, and returns the handlers and input schemas for the fast path.
func (s *Server) addTools(server *mcp.Server) (map[string]mcp.MethodHandler, map[string]any, error) {
	fastTools := map[string]mcp.MethodHandler{}
	schemas := map[string]any{}
	for _, spec := range s.allTools() {
		handler := s.toolHandler(spec)
		// The low-level AddTool does not validate arguments against the
		// schema: our own validation runs, so every rejection carries our
		// code and its audit row. The schemas are still published.
		server.AddTool(&mcp.Tool{
			Name:         spec.Name,
			Title:        spec.Title,
			Description:  spec.Description,
			InputSchema:  spec.InputSchema,
			OutputSchema: spec.OutputSchema,
			Annotations:  annotations(spec),
		}, handler)
		fastTools[spec.Name] = s.recoverMCP(func(ctx context.Context, _ string, req mcp.Request) (mcp.Result, error) {
			return handler(ctx, req.(*mcp.CallToolRequest))
		})
		schemas[spec.Name] = spec.InputSchema
	}
	if err := s.addTaskMethods(server); err != nil {
		return nil, nil, err
	}
	server.AddReceivingMiddleware(s.recoverMCP, s.taskCalls)
	return fastTools, schemas, nil
}

// serveMCP serves server over Streamable HTTP (stateless, JSON answers)
// behind singleCall (which also records each message's MCP span and
// duration, mcpspan.go) and the task layer, with fast in front when set.
func (s *Server) serveMCP(server *mcp.Server, fast *fastPath) http.Handler {
	return singleCall(s.metrics, s.mcpTelemetry, fast, s.taskLayer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		Logger:       s.logger,
	})))
}

// recoverMCP turns a panic in a handler into an internal error. The SDK
// runs handlers on goroutines of its own, where the router's Recoverer
// cannot catch them, and a panic there would stop the process.
func (s *Server) recoverMCP(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		defer func() {
			if p := recover(); p != nil {
				requestID := RequestIDFromContext(ctx)
				s.logger.ErrorContext(ctx, "MCP handler panicked", "request_id", requestID, "method", method,
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error (request " + requestID + ")"}
			}
		}()
		return next(ctx, method, req)
	}
}

func (s *Server) toolHandler(def *toolspec.Spec) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		actor, ok := ActorFromContext(ctx)
		if !ok {
			// The authenticate middleware runs before every MCP request; a
			// missing actor is a wiring mistake, never a client's.
			return toolError(&callError{err: vocab.Errorf(vocab.CodeUnauthenticated, "", "no authenticated actor")}), nil
		}
		c := &call{actor: actor, requestID: RequestIDFromContext(ctx), clientRequestID: ClientRequestIDFromContext(ctx), tool: def, raw: req.Params.Arguments}
		var (
			out  any
			cerr *callError
		)
		if def.Mutating {
			// A 2026-07-28 call: a retry's requestState is checked (and a
			// confirmed duplicate question confirms), and an answer that
			// needs a person may become input_required (mrtr.go).
			m := mrtrFrom(ctx)
			answered := false
			if m != nil {
				raw, a, err := s.mrtrConfirm(c, m)
				if err != nil {
					return nil, err
				}
				c.raw, answered = raw, a
			}
			ans, mcerr := s.mutate(ctx, c)
			if m != nil && !(answered && mcerr != nil && mcerr.err.Code == vocab.CodePossibleDuplicate) {
				if ext, _ := ctx.Value(taskExtCallKey{}).(bool); !ext || mcerr != nil {
					if r := s.mrtrAnswer(c, m, ans, mcerr); r != nil {
						return r, nil
					}
				}
			}
			out, cerr = ans, mcerr
		} else {
			out, cerr = s.read(ctx, c)
		}
		if cerr != nil {
			return toolError(cerr), nil
		}
		// The text and the structured content are the same JSON: marshal
		// it once (the SDK writes a RawMessage as it is).
		text := mustJSON(out)
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: string(text)}},
			StructuredContent: json.RawMessage(text),
		}, nil
	}
}

// toolError is a tool error result carrying our code: the agent sees it and
// can act on it, unlike a protocol error.
func toolError(e *callError) *mcp.CallToolResult {
	body := e.body()
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: string(mustJSON(body))}},
		StructuredContent: json.RawMessage(mustJSON(body)),
	}
}
