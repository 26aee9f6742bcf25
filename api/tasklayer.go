package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/idemgate/idemgate/domain"
)

// The Go SDK (v1.8) has no fields for the tasks capability, a tool's
// execution.taskSupport, or a call's params.task (it drops the member when
// it decodes a call). taskLayer, in front of its stateless handler, where
// each HTTP request is one JSON-RPC message, adds what it lacks:
//   - the tasks capability in the initialize answer;
//   - execution.taskSupport "optional" on every mutation in tools/list;
//   - task-augmented tools/call, claimed through the gate like a plain call
//     (without waiting) and answered with the task.
// tasks/get, tasks/result, tasks/list and tasks/cancel are the SDK's custom
// methods (tasks.go).

// rpcEnvelope is what the layer reads of a JSON-RPC request.
type rpcEnvelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Task      json.RawMessage `json:"task"`
	} `json:"params"`
}

// tasksCapability is the server's capabilities.tasks.
var tasksCapability = map[string]any{
	"list":   map[string]any{},
	"cancel": map[string]any{},
	"requests": map[string]any{
		"tools": map[string]any{"call": map[string]any{}},
	},
}

// taskLayer serves one request to /mcp in front of next, the SDK's handler;
// body is the POST body singleCall read.
func (s *Server) taskLayer(next http.Handler) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		var env rpcEnvelope
		if json.Unmarshal(body, &env) != nil || len(env.ID) == 0 {
			next.ServeHTTP(w, r) // malformed, or a notification: the SDK answers
			return
		}
		switch {
		case env.Method == "tools/call" && len(env.Params.Task) > 0 && !bytes.Equal(env.Params.Task, []byte("null")):
			s.taskCall(w, r, &env)
		case env.Method == "initialize" || env.Method == "tools/list":
			s.rewrite(w, r, next, env.Method)
		default:
			next.ServeHTTP(w, r)
		}
	}
}

// taskCall answers a task-augmented tools/call: the gate claims the intent
// exactly as for a plain call, and the answer is the operation's task. A
// call refused before it has an operation of its own (bad arguments, a
// conflict, an expired key, a limit) is a JSON-RPC error whose data is the
// tool error body.
func (s *Server) taskCall(w http.ResponseWriter, r *http.Request, env *rpcEnvelope) {
	ctx := r.Context()
	if env.Params.Task[0] != '{' {
		writeRPC(w, env.ID, nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: domain.Errorf(domain.CodeInvalidArgument, "task", "must be an object")}))
		return
	}
	spec, ok := s.toolByName(env.Params.Name)
	if !ok {
		writeRPC(w, env.ID, nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: domain.Errorf(domain.CodeNotFound, "name", "no tool %q", env.Params.Name)}))
		return
	}
	if !spec.Mutating {
		writeRPC(w, env.ID, nil, rpcError(jsonrpc.CodeMethodNotFound, &callError{err: domain.Errorf(domain.CodeInvalidArgument, "task", "%s does not run as a task; call it without params.task", spec.Name)}))
		return
	}
	actor, _ := ActorFromContext(ctx)
	c := &call{actor: actor, requestID: RequestIDFromContext(ctx), clientRequestID: ClientRequestIDFromContext(ctx),
		tool: spec, raw: env.Params.Arguments, noWait: true}
	ans, cerr := s.mutate(ctx, c)
	switch {
	case cerr != nil && cerr.stored:
		// A replay of a failed operation: the task exists, failed.
		writeRPC(w, env.ID, map[string]any{"task": s.taskOf(cerr.operation)}, nil)
	case cerr != nil:
		code := int64(jsonrpc.CodeInvalidParams)
		switch cerr.err.Code {
		case domain.CodeInternal, domain.CodeUnavailable, domain.CodeRateLimited:
			code = jsonrpc.CodeInternalError
		}
		writeRPC(w, env.ID, nil, rpcError(code, cerr))
	default:
		writeRPC(w, env.ID, map[string]any{"task": s.taskOf(ans.Operation)}, nil)
	}
}

// writeRPC writes one JSON-RPC response: result, or err.
func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, err *jsonrpc.Error) {
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if err != nil {
		msg["error"] = err
	} else {
		msg["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(msg)
}

// rewrite runs the SDK's handler and adds the tasks capability to its
// initialize answer, or execution.taskSupport to its tools/list answer.
func (s *Server) rewrite(w http.ResponseWriter, r *http.Request, next http.Handler, method string) {
	rec := &recorder{header: http.Header{}}
	next.ServeHTTP(rec, r)
	out := rec.body.Bytes()
	if rec.status == http.StatusOK {
		if edited, ok := s.editAnswer(out, method); ok {
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

// editAnswer edits a JSON answer (the handler answers JSON, not SSE);
// false leaves it as it is.
func (s *Server) editAnswer(body []byte, method string) ([]byte, bool) {
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
	case "initialize":
		caps, ok := result["capabilities"].(map[string]any)
		if !ok {
			return nil, false
		}
		caps["tasks"] = tasksCapability
	case "tools/list":
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
