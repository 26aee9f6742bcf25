package api

// Shim: the tasks extension io.modelcontextprotocol/tasks (SEP-2663) of
// 2026-07-28, which the go-sdk v1.8.0 does not implement. Delete it (and
// the task layer's 2026-07-28 branch) when the SDK has the extension: its
// capability in server/discover, CreateTaskResult from a tools/call
// handler, and tasks/get, tasks/update and tasks/cancel over a server's
// task store (go-sdk issue #626).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Tasks for 2026-07-28 clients: the extension io.modelcontextprotocol/tasks
// (SEP-2663). The go-sdk (v1.8) has no task API; when it has one (go-sdk
// issue #626: the extension's capability, CreateTaskResult and the tasks/*
// methods), this file and the task layer's 2026-07-28 branch can go.
//
// One meaning on both revisions: the task id is the operation id, so the
// same idempotency key is the same task whichever revision retries it.
// The shapes differ:
//   - a client declares the extension in the request's _meta client
//     capabilities; the server decides: a mutation whose outcome is
//     terminal within the call's wait (IDEMGATE_WAIT) answers the plain
//     result, one that is not answers CreateTaskResult (resultType
//     "task"); a request without the declaration never gets a task;
//   - tasks/get, tasks/update and tasks/cancel need the declaration on the
//     request as well: without it they are refused with -32021 (missing
//     required client capability, HTTP 400), before any task is looked up;
//   - tasks/get answers the task with resultType "complete", and once it
//     is terminal the result inlined: what a plain call with the key
//     answers (a failed operation is a tool error, isError true, so its
//     task is "completed" as the extension says; "failed" is for JSON-RPC
//     errors, which a settled operation never is); cancelled is
//     "cancelled";
//   - tasks/cancel acknowledges with an empty result whatever the id, and
//     cancels through the gate when it can (cooperative, as the extension
//     says: a started task runs on, its status says how it ended);
//   - a task awaiting a person's approval is input_required, and tasks/get
//     carries one input request: a URL-mode elicitation (key "approval")
//     whose URL is the approval page, where a person of the tenant other
//     than the requester decides;
//   - tasks/update acknowledges with an empty result once the task is
//     found: an answer to the elicitation (the user saying "done") is not
//     the decision, only the client's cue to poll tasks/get, which reads
//     the decision from the database;
//   - ttlMs and pollIntervalMs, not ttl and pollInterval, as the
//     extension's specification and its official client
//     (@modelcontextprotocol/ext-tasks, which requires ttlMs) name them;
//     ttlSeconds and pollIntervalMilliseconds beside them, the names of
//     the SEP-2663 text, for clients built to it;
//   - no tasks/result and no tasks/list (-32601 on 2026-07-28).

// taskExtCallKey marks a tools/call whose client declared the extension.
type taskExtCallKey struct{}

// revisionKey carries the request's Mcp-Protocol-Version to the SDK's
// handlers.
type revisionKey struct{}

// statelessRevision reports whether ctx is a 2026-07-28 request.
func statelessRevision(ctx context.Context) bool {
	v, _ := ctx.Value(revisionKey{}).(string)
	return v >= mcpVersionStateless
}

// declaresTasksExtension reports whether a call's _meta client
// capabilities name the tasks extension (its value an object).
func declaresTasksExtension(c *callParams) bool {
	if c == nil || c.meta == nil {
		return false
	}
	var meta struct {
		Caps *struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
		} `json:"io.modelcontextprotocol/clientCapabilities"`
	}
	// readEnvelope has refused duplicate and case-folded names in _meta.
	if json.Unmarshal(c.meta, &meta) != nil || meta.Caps == nil {
		return false
	}
	v, ok := meta.Caps.Extensions[tasksExtension]
	return ok && len(v) > 0 && v[0] == '{'
}

// needsTasksExtension wraps the handler of tasks/get, tasks/update or
// tasks/cancel: on 2026-07-28, a request whose _meta client capabilities
// do not name the extension is refused with SEP-2575's
// MissingRequiredClientCapabilityError (-32021, which the SDK answers with
// HTTP 400), its data the capability the method needs, before any task is
// looked up. The SDK has checked the _meta triple itself before.
func needsTasksExtension(h func(context.Context, *mcp.ServerSession, *taskIDParams) (mcp.Result, error)) func(context.Context, *mcp.ServerSession, *taskIDParams) (mcp.Result, error) {
	return func(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
		if !statelessRevision(ctx) || p.declaresTasksExtension() {
			return h(ctx, ss, p)
		}
		return nil, &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities,
			Message: "missing required client capability: the extension " + tasksExtension + " in the request's client capabilities",
			Data:    json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + tasksExtension + `":{}}}}`)}
	}
}

// declaresTasksExtension reports whether the request's _meta client
// capabilities name the tasks extension (its value an object).
func (p *taskIDParams) declaresTasksExtension() bool {
	if p == nil {
		return false
	}
	caps, _ := p.Meta[metaClientCapabilities].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[tasksExtension].(map[string]any)
	return ok
}

// extTask is a task as the extension shapes it: CreateTaskResult
// (resultType "task") and tasks/get's DetailedTask (resultType
// "complete").
type extTask struct {
	mcp.ResultBase
	ResultType               string `json:"resultType"`
	TaskID                   string `json:"taskId"`
	Status                   string `json:"status"`
	StatusMessage            string `json:"statusMessage,omitempty"`
	CreatedAt                string `json:"createdAt"`
	LastUpdatedAt            string `json:"lastUpdatedAt"`
	TTLMs                    *int64 `json:"ttlMs"`
	PollIntervalMs           int64  `json:"pollIntervalMs,omitempty"`
	TTLSeconds               *int64 `json:"ttlSeconds"`
	PollIntervalMilliseconds int64  `json:"pollIntervalMilliseconds,omitempty"`
	// Result is the outcome of a completed task: a CallToolResult of
	// 2026-07-28, with its resultType (completeResult).
	Result json.RawMessage `json:"result,omitempty"`
	// InputRequests are an input_required task's requests to the client,
	// by key: here the approval page as a URL-mode elicitation.
	InputRequests map[string]*inputRequest `json:"inputRequests,omitempty"`
}

// inputRequest is a server-to-client request carried in a task
// (elicitation/create, URL mode).
type inputRequest struct {
	Method string          `json:"method"`
	Params *urlElicitation `json:"params"`
}

// urlElicitation asks the user to open URL (elicitation/create's
// URL-mode params).
type urlElicitation struct {
	Mode          string `json:"mode"`
	Message       string `json:"message"`
	URL           string `json:"url"`
	ElicitationID string `json:"elicitationId"`
}

// approvalInput is the key of the approval's input request.
const approvalInput = "approval"

// ackResult is the empty acknowledgement of tasks/cancel and tasks/update.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// extTaskOf is op as the extension's task.
func (s *Server) extTaskOf(op *vocab.Operation, resultType string) *extTask {
	t := s.taskOf(op)
	e := &extTask{
		ResultType: resultType, TaskID: t.TaskID, Status: t.Status, StatusMessage: t.StatusMessage,
		CreatedAt: t.CreatedAt, LastUpdatedAt: t.LastUpdatedAt, PollIntervalMs: t.PollInterval, PollIntervalMilliseconds: t.PollInterval,
	}
	if t.TTL != nil {
		e.TTLMs, e.TTLSeconds = ptr(*t.TTL), ptr(*t.TTL/1000)
	}
	if e.Status == TaskFailed {
		e.Status = TaskCompleted // a tool error is a result (see above)
	}
	return e
}

// extTaskCall answers a tools/call whose client declared the extension: the
// call runs as a plain call does (the same gate, wait and answer); a
// mutation whose outcome is not terminal when the wait ends answers its
// task instead of the in_flight result.
func (s *Server) extTaskCall(ctx context.Context, next mcp.MethodHandler, method string, req *mcp.CallToolRequest) (mcp.Result, error) {
	spec, ok := s.toolByName(req.Params.Name)
	res, err := next(ctx, method, req)
	if !ok || !spec.Mutating || err != nil {
		return res, err
	}
	result, ok := res.(*mcp.CallToolResult)
	if !ok || result.IsError {
		return res, err
	}
	raw, ok := result.StructuredContent.(json.RawMessage)
	if !ok {
		return res, err
	}
	var ans Answer
	if json.Unmarshal(raw, &ans) != nil || ans.Operation == nil || ans.Operation.Status.Terminal() {
		return res, err
	}
	return s.extTaskOf(s.withNextAttempt(ctx, ans.Operation), "task"), nil
}

// extTaskGet is tasks/get on 2026-07-28.
func (s *Server) extTaskGet(ctx context.Context, c *core.Claim) (mcp.Result, error) {
	t := s.extTaskOf(s.describe(ctx, c), "complete")
	if c.Status == vocab.StatusAwaitingApproval {
		t.InputRequests = map[string]*inputRequest{approvalInput: {Method: "elicitation/create", Params: &urlElicitation{
			Mode: "url", Message: t.StatusMessage, URL: s.approvalURL(c.OperationID), ElicitationID: c.OperationID}}}
	}
	if c.Status.Terminal() && t.Status == TaskCompleted {
		ans, cerr := answer(&core.ClaimResult{Outcome: vocab.OutcomeReplayed, Replayed: true, Claim: c})
		t.Result = completeResult(callResult(ans, cerr))
	}
	return t, nil
}

// completeResult is r as a 2026-07-28 CallToolResult, which carries
// resultType "complete" (the SDK writes it only on the results it answers
// itself, not on one inlined in a task): the extension's official client
// refuses a completed task's result without it.
func completeResult(r *mcp.CallToolResult) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(mustJSON(r)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		panic(fmt.Sprintf("api: a CallToolResult is not a JSON object: %v", err))
	}
	m["resultType"] = "complete"
	return mustJSON(m)
}

// extTaskUpdate is tasks/update: an acknowledgement for the caller's task.
// Whatever the client answers to the approval's elicitation decides
// nothing (a person decides on the page); its next tasks/get reads what
// was decided. Responses to keys that are not outstanding are ignored, as
// the extension says.
func (s *Server) extTaskUpdate(ctx context.Context, _ *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
	if _, _, err := s.taskClaim(ctx, p.id(), false); err != nil {
		return nil, err
	}
	return &ackResult{ResultType: "complete"}, nil
}

// extTaskCancel is tasks/cancel on 2026-07-28: an acknowledgement whatever
// the id; a queued task is cancelled through the gate as on 2025-11-25.
// Only a database that cannot answer is an error.
func (s *Server) extTaskCancel(ctx context.Context, p *taskIDParams) (mcp.Result, error) {
	_, err := s.cancelTask(ctx, nil, p)
	var werr *jsonrpc.Error
	if errors.As(err, &werr) && werr.Code == jsonrpc.CodeInternalError {
		return nil, err
	}
	return &ackResult{ResultType: "complete"}, nil
}
