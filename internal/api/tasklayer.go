package api

// Shim: the 2025-11-25 tasks (SEP-1686) the go-sdk v1.8.0 lacks on the
// server (and the routing of 2026-07-28 task calls to taskext.go). Delete
// it when the SDK has them: a tasks capability in ServerCapabilities,
// Tool.Execution.TaskSupport, a task-augmented tools/call (CallToolParams
// keeping params.task, answered with CreateTaskResult by a handler the
// server provides) and, for the 2026-07-28 branch, the SEP-2663 extension
// (go-sdk issue #626).

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/internal/vocab"
)

// The Go SDK (v1.8) has no fields for the tasks capability, a tool's
// execution.taskSupport, or a call's params.task (it drops the member when
// it decodes a call). taskLayer, in front of its stateless handler, where
// each HTTP request is one JSON-RPC message, adds what it lacks:
//   - the tasks capability in the initialize answer;
//   - execution.taskSupport "optional" on every mutation in tools/list;
//   - task-augmented tools/call: it marks the request's context, and the
//     call goes through the SDK's transport and its checks (Host,
//     Content-Type, Accept, protocol version, standard headers) like any
//     other; the receiving middleware taskCalls then claims it through the
//     gate like a plain call (without waiting) and answers the task.
// tasks/get, tasks/result, tasks/list and tasks/cancel are the SDK's custom
// methods (tasks.go).

// tasksCapability is the server's capabilities.tasks.
var tasksCapability = map[string]any{
	"list":   map[string]any{},
	"cancel": map[string]any{},
	"requests": map[string]any{
		"tools": map[string]any{"call": map[string]any{}},
	},
}

// taskLayer serves one request to /mcp in front of next, the SDK's handler;
// env is the message singleCall read (nil for other HTTP methods and
// bodies the SDK refuses by size).
func (s *Server) taskLayer(next http.Handler) func(http.ResponseWriter, *http.Request, *envelope) {
	return func(w http.ResponseWriter, r *http.Request, env *envelope) {
		if !s.checkRequest(w, r, env) {
			return
		}
		version := r.Header.Get("Mcp-Protocol-Version")
		stateless := version >= mcpVersionStateless
		r = r.WithContext(context.WithValue(r.Context(), revisionKey{}, version))
		switch {
		case env == nil || env.id == nil:
			next.ServeHTTP(w, r) // a notification or a response: the SDK answers
		case env.method == methodToolsCall && stateless:
			// 2026-07-28 has no params.task (the SDK drops it): a task only
			// for a client that declares the extension on this request.
			if declaresTasksExtension(env.call) {
				r = r.WithContext(context.WithValue(r.Context(), taskExtCallKey{}, true))
			}
			r = r.WithContext(context.WithValue(r.Context(), mrtrKey{}, readMRTR(env.call, env.params)))
			next.ServeHTTP(w, r)
		case env.method == methodToolsCall && env.call.isTask():
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), taskCallKey{}, env.call.task)))
		case stateless && taskRouted[env.method] && !routedToTask(r, env):
			writeEnvelopeError(w, http.StatusBadRequest, &envelopeError{code: mcp.CodeHeaderMismatch, id: env.id,
				msg: "header mismatch: the Mcp-Name header of " + env.method + " must be its params.taskId"})
		case env.method == methodInitialize || env.method == methodDiscover || editedLists[env.method]:
			s.rewrite(w, r, next, env.method)
		default:
			next.ServeHTTP(w, r)
		}
	}
}

// taskRouted are the extension's methods whose Mcp-Name header is the task
// id (SEP-2663, "Routing Headers"), so that intermediaries can route them.
var taskRouted = map[string]bool{"tasks/get": true, "tasks/update": true, "tasks/cancel": true}

// routedToTask reports whether the request's Mcp-Name header is its
// params.taskId.
func routedToTask(r *http.Request, env *envelope) bool {
	var p struct {
		TaskID *string `json:"taskId"`
	}
	if env.params == nil || json.Unmarshal(env.params, &p) != nil || p.TaskID == nil {
		return true // the method's own checks refuse the params
	}
	return r.Header.Get("Mcp-Name") == *p.TaskID
}

// taskCallKey is the context key of a task-augmented call's params.task.
type taskCallKey struct{}

// taskCalls is the receiving middleware that answers a tools/call the task
// layer marked as task-augmented; every other request goes on to next.
func (s *Server) taskCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		call, isCall := req.(*mcp.CallToolRequest)
		if method != methodToolsCall || !isCall {
			return next(ctx, method, req)
		}
		if ext, _ := ctx.Value(taskExtCallKey{}).(bool); ext {
			return s.extTaskCall(ctx, next, method, call)
		}
		task, ok := ctx.Value(taskCallKey{}).([]byte)
		if !ok {
			return next(ctx, method, req)
		}
		return s.taskCall(ctx, call, task)
	}
}

// createTaskResult is the answer of a task-augmented tools/call.
type createTaskResult struct {
	mcp.ResultBase
	Task Task `json:"task"`
}

// taskCall answers a task-augmented tools/call: the gate claims the intent
// exactly as for a plain call, and the answer is the operation's task. A
// call refused before it has an operation of its own (bad arguments, a
// conflict, an expired key, a limit) is a JSON-RPC error whose data is the
// tool error body.
func (s *Server) taskCall(ctx context.Context, req *mcp.CallToolRequest, task []byte) (mcp.Result, error) {
	if task[0] != '{' {
		return nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "task", "must be an object")})
	}
	spec, ok := s.toolByName(req.Params.Name)
	if !ok {
		return nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: vocab.Errorf(vocab.CodeNotFound, "name", "no tool %q", req.Params.Name)})
	}
	if !spec.Mutating {
		return nil, rpcError(jsonrpc.CodeMethodNotFound, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "task", "%s does not run as a task; call it without params.task", spec.Name)})
	}
	actor, _ := ActorFromContext(ctx)
	c := &call{actor: actor, requestID: RequestIDFromContext(ctx), clientRequestID: ClientRequestIDFromContext(ctx),
		tool: spec, raw: req.Params.Arguments, noWait: true}
	ans, cerr := s.mutate(ctx, c)
	switch {
	case cerr != nil && cerr.stored:
		// A replay of a failed operation: the task exists, failed.
		return &createTaskResult{Task: s.taskOf(cerr.operation)}, nil
	case cerr != nil:
		code := int64(jsonrpc.CodeInvalidParams)
		switch cerr.err.Code {
		case vocab.CodeInternal, vocab.CodeUnavailable, vocab.CodeRateLimited, vocab.CodeApprovalsPendingLimit:
			code = jsonrpc.CodeInternalError
		}
		return nil, rpcError(code, cerr)
	}
	return &createTaskResult{Task: s.taskOf(s.withNextAttempt(ctx, ans.Operation))}, nil
}

// editedLists are the methods whose results the SDK (v1.8) writes with
// 2026-07-28's cache hints (cacheScope, ttlMs) on every revision; rewrite
// drops them for the revisions that have no such members.
var editedLists = map[string]bool{
	methodToolsList: true, "prompts/list": true, "resources/list": true, "resources/templates/list": true, "resources/read": true,
}

// rewrite runs the SDK's handler and edits its answer so that each client
// sees the members its revision defines (editAnswer).
func (s *Server) rewrite(w http.ResponseWriter, r *http.Request, next http.Handler, method string) {
	rec := &recorder{header: http.Header{}}
	next.ServeHTTP(rec, r)
	out := rec.body.Bytes()
	if rec.status == http.StatusOK {
		if edited, ok := s.editAnswer(out, method, r.Header.Get("Mcp-Protocol-Version")); ok {
			out = edited
		}
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(rec.status)
	_, _ = w.Write(out)
}

// editAnswer edits a JSON answer (the handler answers JSON, not SSE) of the
// request's revision (version is its Mcp-Protocol-Version header; an
// initialize answer names the negotiated one); false leaves it as it is:
//   - 2025-11-25 (SEP-1686 tasks): the tasks capability in initialize,
//     execution.taskSupport "optional" on every mutation in tools/list;
//   - 2026-07-28: the tasks extension (SEP-2663) in server/discover's
//     capabilities.extensions; no execution (the extension is the one
//     handshake);
//   - revisions before 2026-07-28: no cacheScope or ttlMs in list results;
//     before 2025-11-25, no tasks at all.
func (s *Server) editAnswer(body []byte, method, version string) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var msg map[string]any
	if dec.Decode(&msg) != nil {
		return nil, false
	}
	result, ok := msg["result"].(map[string]any)
	if !ok {
		return nil, false
	}
	switch method {
	case methodInitialize:
		caps, ok := result["capabilities"].(map[string]any)
		if !ok {
			return nil, false
		}
		if result["protocolVersion"] != mcpVersionTasks {
			return nil, false
		}
		caps["tasks"] = tasksCapability
	case methodDiscover:
		caps, ok := result["capabilities"].(map[string]any)
		if !ok {
			return nil, false
		}
		ext, _ := caps["extensions"].(map[string]any)
		if ext == nil {
			ext = map[string]any{}
		}
		ext[tasksExtension] = map[string]any{}
		caps["extensions"] = ext
	default:
		if version >= mcpVersionStateless {
			return nil, false
		}
		delete(result, "cacheScope")
		delete(result, "ttlMs")
		if method != methodToolsList || version != mcpVersionTasks {
			break
		}
		tools, _ := result["tools"].([]any)
		for _, t := range tools {
			tm, ok := t.(map[string]any)
			if !ok {
				continue
			}
			name, _ := tm["name"].(string)
			if spec, ok := s.tools.Get(name); ok && spec.Mutating {
				tm["execution"] = map[string]any{"taskSupport": "optional"}
			}
		}
	}
	out, err := json.Marshal(msg)
	if err != nil {
		return nil, false
	}
	return append(out, '\n'), true
}

// recorder keeps a handler's answer for rewrite.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
