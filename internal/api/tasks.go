package api

// Shim: tasks/get, tasks/result, tasks/list and tasks/cancel of 2025-11-25
// as custom methods, since the go-sdk v1.8.0 has no task methods. Delete
// the protocol part when the SDK serves them over a task store the server
// implements (go-sdk issue #626); the mapping of an operation to a task's
// status and result would remain, as that store.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// MCP tasks (protocol revision 2025-11-25). The task id is the operation
// id, so the same idempotency_key retried as a task is the same task.

// Task statuses of the MCP specification.
const (
	TaskWorking   = "working"
	TaskCompleted = "completed"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
	// TaskInputRequired: the operation waits for a person's approval.
	TaskInputRequired = "input_required"
)

// Bounds of a task's pollInterval.
const (
	minPollInterval = 200 * time.Millisecond
	maxPollInterval = time.Minute
)

// TaskResultWait bounds how long tasks/result waits for an outcome: a
// response must come within the server's write timeout. A caller whose
// wait ends calls again.
const TaskResultWait = 25 * time.Second

// relatedTaskMeta is the _meta key naming the task a result belongs to.
const relatedTaskMeta = "io.modelcontextprotocol/related-task"

// Task is an operation as an MCP task.
type Task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTL is the tool's replay window in milliseconds.
	TTL          *int64 `json:"ttl"`
	PollInterval int64  `json:"pollInterval,omitempty"`
}

// taskOf returns op as a task.
func (s *Server) taskOf(op *vocab.Operation) Task {
	t := Task{
		TaskID:        op.OperationID,
		Status:        TaskWorking,
		CreatedAt:     op.CreatedAt.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt: op.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
	if p, ok := s.gate.Policy(op.Tool); ok {
		t.TTL = ptr(p.TTL.Milliseconds())
	}
	switch op.Status {
	case vocab.StatusSucceeded:
		t.Status, t.StatusMessage = TaskCompleted, "succeeded"
	case vocab.StatusFailed:
		t.Status = TaskFailed
		if op.Error != nil && op.Error.Code == vocab.CodeCancelled {
			t.Status = TaskCancelled
		}
		if op.Error != nil {
			t.StatusMessage = string(op.Error.Code) + ": " + op.Error.Message
		}
	case vocab.StatusRunning:
		t.StatusMessage = fmt.Sprintf("running: attempt %d", op.Attempts)
	case vocab.StatusAwaitingApproval:
		// Both task shapes name the state in which a person must act, and
		// where.
		t.Status, t.StatusMessage = TaskInputRequired, s.awaitingMessage(op)
	default:
		t.StatusMessage = "queued"
		if op.Attempts > 0 {
			t.StatusMessage = fmt.Sprintf("queued: attempt %d next", op.Attempts+1)
		}
		if op.NextAttemptAt != nil {
			t.StatusMessage += " at " + op.NextAttemptAt.UTC().Format(time.RFC3339)
		}
	}
	t.PollInterval = pollInterval(op, time.Now()).Milliseconds()
	if op.LastError != nil {
		t.StatusMessage += "; last error: " + string(op.LastError.Code) + ": " + op.LastError.Message
	}
	return t
}

// awaitingMessage is the status message of a task awaiting approval: who
// may decide, where and until when.
func (s *Server) awaitingMessage(op *vocab.Operation) string {
	msg := "awaiting_approval: " + s.approvalURL(op.OperationID)
	if a := op.Approval; a != nil {
		msg = "awaiting_approval: " + a.MayDecide + " must approve it at " + s.approvalURL(op.OperationID)
		if a.ExpiresAt != nil {
			msg += " before " + a.ExpiresAt.UTC().Format(time.RFC3339)
		}
	}
	return msg
}

// pollInterval is the poll interval of an operation's task, the same in
// every answer that shows it (CreateTaskResult, tasks/get, tasks/list, on
// both revisions): the time to its next attempt (200 ms to 1 min) while it
// waits for a retry scheduled ahead; the in-flight retry advice
// (core.DefaultRetryAfter) while it runs or waits for a worker; 0 (none)
// once it is terminal.
func pollInterval(op *vocab.Operation, now time.Time) time.Duration {
	switch {
	case op.Status.Terminal():
		return 0
	case op.Status == vocab.StatusAwaitingApproval:
		return core.ApprovalRetryAfter
	case op.Status == vocab.StatusQueued && op.NextAttemptAt != nil && op.NextAttemptAt.After(now):
		return min(max(op.NextAttemptAt.Sub(now), minPollInterval), maxPollInterval)
	}
	return core.DefaultRetryAfter
}

// taskIDParams are the parameters of tasks/get, tasks/result and
// tasks/cancel.
type taskIDParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
	// RequestState and InputResponses are the extension's (SEP-2663);
	// this server sets no requestState and asks for no input.
	RequestState   string          `json:"requestState,omitempty"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
}

// id is the task id asked for; "" when the request had no params (the
// SDK passes nil then).
func (p *taskIDParams) id() string {
	if p == nil {
		return ""
	}
	return p.TaskID
}

// taskResult is the answer of tasks/get and tasks/cancel: the task itself.
type taskResult struct {
	mcp.ResultBase
	Task
}

// listTasksParams are the parameters of tasks/list.
type listTasksParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

// listTasksResult is the answer of tasks/list.
type listTasksResult struct {
	mcp.ResultBase
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// taskMethods are the methods addTaskMethods serves.
var taskMethods = []string{"tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update"}

// Task methods of one revision only: SEP-1686's tasks/result and
// tasks/list are not the extension's, its tasks/update not SEP-1686's.
var (
	legacyTaskMethods    = map[string]bool{"tasks/result": true, "tasks/list": true}
	statelessTaskMethods = map[string]bool{"tasks/update": true}
)

// addTaskMethods serves tasks/get, tasks/result, tasks/list and
// tasks/cancel on server.
func (s *Server) addTaskMethods(server *mcp.Server) error {
	if err := mcp.AddReceivingCustomMethod(server, "tasks/get", needsTasksExtension(func(ctx context.Context, _ *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
		c, _, err := s.taskClaim(ctx, p.id(), false)
		if err != nil {
			return nil, err
		}
		if statelessRevision(ctx) {
			return s.extTaskGet(ctx, c)
		}
		return &taskResult{Task: s.taskOf(s.describe(ctx, c))}, nil
	})); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(server, "tasks/update", needsTasksExtension(s.extTaskUpdate)); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(server, "tasks/result", s.taskPayload); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(server, "tasks/list", s.listTasks); err != nil {
		return err
	}
	return mcp.AddReceivingCustomMethod(server, "tasks/cancel", needsTasksExtension(func(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
		if statelessRevision(ctx) {
			return s.extTaskCancel(ctx, p)
		}
		return s.cancelTask(ctx, ss, p)
	}))
}

// taskClaim finds the caller's task by id. A reader needs operations:read
// or the tool's own scope; a canceller (write) the tool's scope.
func (s *Server) taskClaim(ctx context.Context, taskID string, write bool) (*core.Claim, *toolspec.Spec, error) {
	actor, ok := ActorFromContext(ctx)
	if !ok {
		return nil, nil, rpcError(jsonrpc.CodeInternalError, &callError{err: vocab.Errorf(vocab.CodeUnauthenticated, "", "no authenticated actor")})
	}
	if _, err := uuid.Parse(taskID); err != nil || len(taskID) != 36 {
		return nil, nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "taskId", "is not a task id of this server")})
	}
	readCtx, cancel := context.WithTimeout(ctx, s.dbTimeout)
	defer cancel()
	c, err := s.gate.Store().ClaimGetByOperation(readCtx, &core.ClaimGetByOperationParams{TenantID: actor.TenantID, OperationID: taskID})
	if errors.Is(err, vocab.ErrNotFound) {
		return nil, nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: vocab.Errorf(vocab.CodeNotFound, "taskId", "no task %s", taskID)})
	}
	if err != nil {
		return nil, nil, rpcError(jsonrpc.CodeInternalError, s.internal(ctx, &call{actor: actor, requestID: RequestIDFromContext(ctx), tool: s.getOperation}, err))
	}
	spec, ok := s.tools.Get(c.Tool)
	if !ok {
		return nil, nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: vocab.Errorf(vocab.CodeNotFound, "taskId", "task %s belongs to a tool this server no longer serves", taskID)})
	}
	if !actor.HasScope(spec.Scope) && (write || !actor.HasScope(ScopeOperationsRead)) {
		need := spec.Scope
		if !write {
			need = ScopeOperationsRead + " or " + spec.Scope
		}
		cerr := s.deny(ctx, &call{actor: actor, requestID: RequestIDFromContext(ctx), clientRequestID: ClientRequestIDFromContext(ctx), tool: spec},
			c.IdempotencyKey, vocab.Errorf(vocab.CodeForbidden, "", "the token lacks scope %s for this task", need), time.Now())
		return nil, nil, rpcError(jsonrpc.CodeInvalidParams, cerr)
	}
	return c, spec, nil
}

// taskPayload is tasks/result: once the operation is terminal, what a plain
// call with its key answers (a replay), waiting up to TaskResultWait.
func (s *Server) taskPayload(ctx context.Context, _ *mcp.ServerSession, p *taskIDParams) (*mcp.CallToolResult, error) {
	c, _, err := s.taskClaim(ctx, p.id(), false)
	if err != nil {
		return nil, err
	}
	if !c.Status.Terminal() {
		if c, err = s.gate.Await(ctx, c, TaskResultWait); err != nil {
			return nil, rpcError(jsonrpc.CodeInternalError, unavailableFor(err))
		}
	}
	if !c.Status.Terminal() {
		cerr := &callError{err: vocab.Errorf(vocab.CodeUnavailable, "", "task %s is still %s after %s; call tasks/result again", c.OperationID, c.Status, TaskResultWait),
			operation: c.Operation(), retryAfter: core.DefaultRetryAfter}
		return nil, rpcError(jsonrpc.CodeInternalError, cerr)
	}
	ans, cerr := answer(&core.ClaimResult{Outcome: vocab.OutcomeReplayed, Replayed: true, Claim: c})
	res := callResult(ans, cerr)
	res.Meta = mcp.Meta{relatedTaskMeta: map[string]any{"taskId": c.OperationID}}
	return res, nil
}

// listTasks is tasks/list: the tenant's operations as tasks, newest first.
func (s *Server) listTasks(ctx context.Context, _ *mcp.ServerSession, p *listTasksParams) (*listTasksResult, error) {
	actor, _ := ActorFromContext(ctx)
	if !actor.HasScope(ScopeOperationsRead) {
		cerr := s.deny(ctx, &call{actor: actor, requestID: RequestIDFromContext(ctx), clientRequestID: ClientRequestIDFromContext(ctx), tool: s.listOperationsTool},
			"", vocab.Errorf(vocab.CodeForbidden, "", "the token lacks scope %s for tasks/list", ScopeOperationsRead), time.Now())
		return nil, rpcError(jsonrpc.CodeInvalidParams, cerr)
	}
	readCtx, cancel := context.WithTimeout(ctx, s.dbTimeout)
	defer cancel()
	cursor := ""
	if p != nil {
		cursor = p.Cursor
	}
	page, err := s.listOperations(readCtx, &core.ClaimListNewestParams{TenantID: actor.TenantID, Limit: DefaultPageSize}, cursor)
	var derr *vocab.Error
	if errors.As(err, &derr) {
		return nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: derr})
	}
	if err != nil {
		return nil, rpcError(jsonrpc.CodeInternalError, s.internal(ctx, &call{actor: actor, requestID: RequestIDFromContext(ctx), tool: s.listOperationsTool}, err))
	}
	out := &listTasksResult{Tasks: make([]Task, 0, len(page.Operations)), NextCursor: page.NextCursor}
	for _, op := range page.Operations {
		out.Tasks = append(out.Tasks, s.taskOf(op))
	}
	return out, nil
}

// cancelTask is tasks/cancel: a queued operation is cancelled through the
// gate; a started or finished one is refused with -32602.
func (s *Server) cancelTask(ctx context.Context, _ *mcp.ServerSession, p *taskIDParams) (*taskResult, error) {
	c, spec, err := s.taskClaim(ctx, p.id(), true)
	if err != nil {
		return nil, err
	}
	actor, _ := ActorFromContext(ctx)
	cancelled, err := s.gate.Cancel(ctx, &core.CancelParams{
		TenantID: actor.TenantID, OperationID: c.OperationID,
		UserID: actor.UserID, TokenID: actor.TokenID, RequestID: RequestIDFromContext(ctx),
		AttemptsLeaveNoEffect: spec.InTx,
	}, s.jobs)
	switch {
	case errors.Is(err, core.ErrCancelTerminal):
		return nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "taskId",
			"cannot cancel task %s: already in terminal status %s", c.OperationID, s.taskOf(cancelled.Operation()).Status), operation: cancelled.Operation()})
	case errors.Is(err, core.ErrCancelStarted):
		return nil, rpcError(jsonrpc.CodeInvalidParams, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "taskId",
			"cannot cancel task %s: it has started and its effect may be under way; poll it for the outcome", c.OperationID), operation: cancelled.Operation()})
	case err != nil:
		return nil, rpcError(jsonrpc.CodeInternalError, s.internal(ctx, &call{actor: actor, requestID: RequestIDFromContext(ctx), tool: spec}, err))
	}
	s.logger.InfoContext(ctx, "task cancelled", "request_id", RequestIDFromContext(ctx), "tenant", actor.TenantID,
		"tool", c.Tool, "operation_id", c.OperationID, "key", c.IdempotencyKey)
	return &taskResult{Task: s.taskOf(cancelled.Operation())}, nil
}

// rpcError is a JSON-RPC error whose data is the tool error body: our code,
// the field and, where there is one, the operation.
func rpcError(code int64, e *callError) *jsonrpc.Error {
	return &jsonrpc.Error{Code: code, Message: e.err.Error(), Data: mustJSON(e.body())}
}

// callResult is a tool call's answer as an MCP result.
func callResult(ans *Answer, cerr *callError) *mcp.CallToolResult {
	if cerr != nil {
		return toolError(cerr)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(mustJSON(ans))}},
		StructuredContent: ans,
	}
}
