package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/telemetry"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Answer is what a mutation call answers with, over MCP and REST alike.
type Answer struct {
	Outcome      vocab.Outcome    `json:"outcome"`
	Replayed     bool             `json:"replayed"`
	RetryAfterMS int64            `json:"retry_after_ms,omitempty"`
	Operation    *vocab.Operation `json:"operation"`
}

// callError is a rejection or failure with its code, as answered to clients.
type callError struct {
	err *vocab.Error
	// operation is set when the error is a stored outcome (a replayed
	// failure) or a conflict with an existing operation.
	operation *vocab.Operation
	replayed  bool
	// stored is set when the error is the operation's own outcome (a
	// failed claim), not a refusal of the call.
	stored bool
	// retryAfter is set for rate_limited, approvals_pending_limit and
	// unavailable.
	retryAfter time.Duration
}

func (e *callError) Error() string { return e.err.Error() }

// errorBody is the JSON of a tool error.
type errorBody struct {
	Error struct {
		Code    vocab.Code `json:"code"`
		Message string     `json:"message"`
		Field   string     `json:"field,omitempty"`
		Fields  []string   `json:"fields,omitempty"`
	} `json:"error"`
	Replayed     bool             `json:"replayed,omitempty"`
	RetryAfterMS int64            `json:"retry_after_ms,omitempty"`
	Operation    *vocab.Operation `json:"operation,omitempty"`
}

func (e *callError) body() *errorBody {
	var b errorBody
	b.Error.Code = e.err.Code
	b.Error.Message = e.err.Message
	b.Error.Field = e.err.Field
	b.Error.Fields = e.err.Fields
	b.Replayed = e.replayed
	b.RetryAfterMS = e.retryAfter.Milliseconds()
	b.Operation = e.operation
	return &b
}

// call is one tool call, from MCP or REST.
type call struct {
	actor     vocab.Actor
	requestID string
	// clientRequestID is the caller's X-Request-Id, stored apart.
	clientRequestID string
	tool            *toolspec.Spec
	// raw are the JSON arguments as received.
	raw []byte
	// noWait answers at once instead of waiting up to the server's Wait
	// for the outcome (a task-augmented call).
	noWait bool
}

// mutate runs a mutation call through the checks in the order of
// docs/design.md, "The gate" (authentication happened before): scope, arguments and key, rate limit,
// then the gate. Every rejection after authentication but the rate limit
// writes one denied audit row.
func (s *Server) mutate(ctx context.Context, c *call) (ans *Answer, cerr *callError) {
	start := time.Now()
	defer func() {
		result := "error"
		switch {
		case ans != nil:
			result = string(ans.Outcome)
		case cerr != nil:
			result = string(cerr.err.Code)
		}
		s.metrics.observe(c.tool.Name, result, time.Since(start))
		attrs := []slog.Attr{
			slog.String("request_id", c.requestID), slog.String("tenant", c.actor.TenantID),
			slog.String("tool", c.tool.Name), slog.String("result", result), slog.Duration("duration", time.Since(start)),
		}
		if ans != nil && ans.Operation != nil {
			attrs = append(attrs, slog.String("key", ans.Operation.IdempotencyKey),
				slog.String("operation_id", ans.Operation.OperationID), slog.Int64("job_id", ans.Operation.JobID))
		}
		s.logger.LogAttrs(ctx, slog.LevelInfo, "mutation", attrs...)
	}()
	if !c.actor.HasScope(c.tool.Scope) {
		return nil, s.deny(ctx, c, "", vocab.Errorf(vocab.CodeForbidden, "", "the token lacks scope %s for %s", c.tool.Scope, c.tool.Name), start)
	}
	args, err := core.DecodeArgs(c.raw)
	if err != nil {
		return nil, s.deny(ctx, c, "", asDomainError(err), start)
	}
	key, _ := args["idempotency_key"].(string)
	if err := c.tool.Validate(args); err != nil {
		return nil, s.deny(ctx, c, key, asDomainError(err), start)
	}
	intent, err := s.gate.NewIntent(c.tool.Name, args)
	if err != nil {
		return nil, s.deny(ctx, c, key, asDomainError(err), start)
	}
	if wait, ok := s.limiter.allow(c.actor.TenantID, c.tool.Name); !ok {
		s.metrics.rateLimited(c.tool.Name)
		return nil, &callError{err: vocab.Errorf(vocab.CodeRateLimited, "", "too many %s calls for this tenant; retry after %s", c.tool.Name, wait.Round(time.Millisecond)), retryAfter: wait}
	}

	wait := s.wait
	if c.noWait {
		wait = 0
	}
	params := &core.ClaimParams{Actor: c.actor, RequestID: c.requestID, ClientRequestID: c.clientRequestID, Intent: intent, Wait: wait}
	if c.tool.NeedsApproval != nil {
		params.Approval = func(ctx context.Context) (time.Duration, string, error) {
			return s.approvalWindow(ctx, c, intent.Canonical)
		}
	}
	res, err := s.gate.Claim(ctx, params)
	var refused *reviewRefusal
	if errors.As(err, &refused) {
		return nil, s.deny(ctx, c, key, refused.err, start)
	}
	if err != nil {
		cerr := s.internal(ctx, c, err)
		if cerr.err.Code == vocab.CodeApprovalsPendingLimit {
			cerr.retryAfter = core.ApprovalsPendingRetryAfter
		}
		return nil, cerr
	}
	s.metrics.outcome(c.tool.Name, res.Outcome)
	ans, cerr = answer(res)
	if ans != nil && ans.Operation.Approval != nil {
		s.linkApproval(ans.Operation)
		ans.RetryAfterMS = core.ApprovalRetryAfter.Milliseconds()
	}
	return ans, cerr
}

// approvalWindow is how long c's call waits for a person's approval, or 0
// when its tool asks none for these arguments (gate.Mutation.Approval, run
// on a read-only transaction with the caller), and the tool's summary for
// the approver (gate.Mutation.Review, on the same transaction). The gate
// asks it only for a call that writes a new intent
// (core.ClaimParams.Approval). A call the Review refuses is a
// *reviewRefusal: nobody is asked and no claim is written.
func (s *Server) approvalWindow(ctx context.Context, c *call, canonical json.RawMessage) (time.Duration, string, error) {
	// The canonical arguments, as the claim stores them and the effect
	// will see them (1e3 is 1000).
	raw := canonical
	tx := &readTx{store: s.gate.Store()}
	defer tx.end(ctx)
	caller := toolspec.Caller{TenantID: c.actor.TenantID, UserID: c.actor.UserID, Scopes: c.actor.Scopes}
	needs, err := c.tool.NeedsApproval(ctx, tx, caller, raw)
	if err != nil || !needs {
		return 0, "", err
	}
	summary := ""
	if c.tool.Review != nil {
		if summary, err = c.tool.Review(ctx, tx, caller, raw); err != nil {
			return 0, "", reviewed(err)
		}
	}
	return c.tool.ApprovalWindow, summary, nil
}

// reviewRefusal is a call its tool's Review refused before anyone was
// asked: the code its effect would have failed with.
type reviewRefusal struct{ err *vocab.Error }

func (r *reviewRefusal) Error() string { return r.err.Error() }

// reviewed is the error of a Review: a refusal for a *vocab.Error or a
// definitive effect error (its code and message), err itself otherwise
// (the database, or a transient failure: the call may be retried).
func reviewed(err error) error {
	var derr *vocab.Error
	if errors.As(err, &derr) {
		return &reviewRefusal{err: derr}
	}
	if te, ok := toolspec.AsError(err); ok && te.Definitive() {
		return &reviewRefusal{err: &vocab.Error{Code: te.Info.Code, Message: te.Info.Message}}
	}
	return err
}

// answer is how a claim's result is answered: an Answer, or the tool
// error of a conflict, an expired key or a stored failure.
func answer(res *core.ClaimResult) (*Answer, *callError) {
	op := res.Claim.Operation()
	switch {
	case res.Outcome == vocab.OutcomeConflict:
		return nil, &callError{err: res.Conflict, operation: op}
	case res.Outcome == vocab.OutcomeExpired:
		return nil, &callError{err: res.Expired, operation: op}
	case res.Outcome == vocab.OutcomeDuplicate:
		return nil, &callError{err: res.Duplicate, operation: op}
	case res.Claim.Status == vocab.StatusFailed && res.Claim.Error != nil:
		// A failed outcome is a tool error carrying the stored code, for the
		// call that saw it happen and for every replay.
		return nil, &callError{
			err:       &vocab.Error{Code: res.Claim.Error.Code, Message: res.Claim.Error.Message},
			operation: op,
			replayed:  res.Replayed,
			stored:    true,
		}
	}
	return &Answer{
		Outcome:      res.Outcome,
		Replayed:     res.Replayed,
		RetryAfterMS: res.RetryAfter.Milliseconds(),
		Operation:    op,
	}, nil
}

// deny writes the denied audit row for a rejection and returns it.
func (s *Server) deny(ctx context.Context, c *call, key string, derr *vocab.Error, start time.Time) *callError {
	reason := string(derr.Code)
	if derr.Field != "" {
		reason += " (" + derr.Field + ")"
	}
	reason += ": " + derr.Message
	auditCtx, cancel := context.WithTimeout(ctx, s.dbTimeout)
	defer cancel()
	if err := s.gate.Store().AuditInsert(auditCtx, &core.AuditInsertParams{
		TenantID:        c.actor.TenantID,
		UserID:          c.actor.UserID,
		TokenID:         c.actor.TokenID,
		RequestID:       c.requestID,
		ClientRequestID: c.clientRequestID,
		Tool:            c.tool.Name,
		IdempotencyKey:  auditText(key, core.KeyMaxLen*2),
		Decision:        vocab.DecisionDenied,
		Reason:          auditText(reason, 1000),
		Duration:        time.Since(start),
		TraceID:         telemetry.TraceID(ctx),
	}); err != nil {
		s.logger.ErrorContext(ctx, "audit: denied row not written", "request_id", c.requestID, "tool", c.tool.Name, "error", err)
		if errors.Is(err, vocab.ErrUnavailable) {
			return unavailableFor(err)
		}
	}
	s.metrics.outcome(c.tool.Name, vocab.Outcome("denied"))
	return &callError{err: derr}
}

// internal maps a gate or store failure to unavailable (the database) or
// internal (anything else, logged, never detailed to the client).
func (s *Server) internal(ctx context.Context, c *call, err error) *callError {
	var derr *vocab.Error
	if errors.As(err, &derr) {
		return &callError{err: derr}
	}
	if errors.Is(err, vocab.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		s.logger.WarnContext(ctx, "database unavailable", "request_id", c.requestID, "tool", c.tool.Name, "error", err)
		return unavailableFor(err)
	}
	s.logger.ErrorContext(ctx, "call failed", "request_id", c.requestID, "tool", c.tool.Name, "error", err)
	return &callError{err: vocab.Errorf(vocab.CodeInternal, "", "internal error (request %s)", c.requestID)}
}

// tooManyClientsMessage is the unavailable answer when Postgres refuses
// connections because all its clients together hold max_connections: it
// names the setting that bounds each process's share (pgengine.TooManyClients
// says the same in the log).
const tooManyClientsMessage = "the database refuses connections: too many clients (Postgres SQLSTATE 53300, " +
	"max_connections reached); lower pool_max_conns in DATABASE_URL of the idemgate processes, put a pooler in front, " +
	"or raise max_connections; retry with the same idempotency_key"

// unavailableFor is the answer when the database cannot serve: err (nil
// when unknown) says why, and Postgres refusing connections for too many
// clients is said as such.
func unavailableFor(err error) *callError {
	msg := "the database is unreachable; retry with the same idempotency_key"
	if tooManyClients(err) {
		msg = tooManyClientsMessage
	}
	return &callError{err: vocab.Errorf(vocab.CodeUnavailable, "", "%s", msg), retryAfter: time.Second}
}

// tooManyClients reports whether err is Postgres refusing a connection for
// too many clients (SQLSTATE 53300, too_many_connections).
func tooManyClients(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && errors.As(err, &pgErr) && pgErr.Code == pgerrcode.TooManyConnections
}

// read runs a read tool.
func (s *Server) read(ctx context.Context, c *call) (any, *callError) {
	start := time.Now()
	if !s.mayRead(c) {
		return nil, s.deny(ctx, c, "", vocab.Errorf(vocab.CodeForbidden, "", "the token lacks scope %s for %s", c.tool.Scope, c.tool.Name), start)
	}
	// Rejected arguments are audited as for mutations: one denied row.
	args, err := core.DecodeArgs(c.raw)
	if err != nil {
		return nil, s.deny(ctx, c, "", asDomainError(err), start)
	}
	key, _ := args["idempotency_key"].(string)
	if err := c.tool.Validate(args); err != nil {
		return nil, s.deny(ctx, c, key, asDomainError(err), start)
	}
	switch c.tool.Name {
	case GetOperation:
		if err := s.checkToolName(args, false); err != nil {
			return nil, s.deny(ctx, c, key, asDomainError(err), start)
		}
		if err := core.ValidateKey(key, key != ""); err != nil {
			return nil, s.deny(ctx, c, key, asDomainError(err), start)
		}
	case ListOperations:
		if err := s.checkToolName(args, true); err != nil {
			return nil, s.deny(ctx, c, key, asDomainError(err), start)
		}
		cursor, _ := args["cursor"].(string)
		if _, err := decodeCursor(cursor); err != nil {
			return nil, s.deny(ctx, c, key, asDomainError(err), start)
		}
		arg, _ := args["arg"].(string)
		if _, _, err := argFilter(arg); err != nil {
			return nil, s.deny(ctx, c, key, asDomainError(err), start)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.dbTimeout)
	defer cancel()
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, s.internal(ctx, c, err)
	}
	tx := &readTx{store: s.gate.Store()}
	defer tx.end(ctx)
	out, err := c.tool.Serve(ctx, tx, toolspec.Caller{TenantID: c.actor.TenantID, UserID: c.actor.UserID, Scopes: c.actor.Scopes}, raw)
	if err != nil {
		return nil, s.internal(ctx, c, err)
	}
	return out, nil
}

// mayRead reports whether c's actor may call its read tool: with the
// tool's scope, or for get_operation with the scope of the mutation it
// names (an agent polls what it may call, as tasks/get allows).
func (s *Server) mayRead(c *call) bool {
	if c.actor.HasScope(c.tool.Scope) {
		return true
	}
	if c.tool.Name != GetOperation {
		return false
	}
	var a struct {
		Tool string `json:"tool"`
	}
	if json.Unmarshal(c.raw, &a) != nil {
		return false
	}
	spec, ok := s.tools.Get(a.Tool)
	return ok && spec.Mutating && c.actor.HasScope(spec.Scope)
}

// operation returns the actor's tenant's operation by tool and key.
func (s *Server) operation(ctx context.Context, actor vocab.Actor, tool, key string) (*vocab.Operation, error) {
	if err := core.ValidateKey(key, key != ""); err != nil {
		return nil, err
	}
	claim, err := s.gate.Store().ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: actor.TenantID, Tool: tool, IdempotencyKey: key})
	if errors.Is(err, vocab.ErrNotFound) {
		return nil, vocab.Errorf(vocab.CodeNotFound, "idempotency_key", "no %s operation with this key", tool)
	}
	if err != nil {
		return nil, err
	}
	return s.describe(ctx, claim), nil
}

func asDomainError(err error) *vocab.Error {
	var derr *vocab.Error
	if errors.As(err, &derr) {
		return derr
	}
	return vocab.Errorf(vocab.CodeInvalidArgument, "arguments", "%v", err)
}

// auditText makes client-supplied text storable in an audit row: at most
// n bytes, cut at a rune boundary, valid UTF-8, and without NUL, which
// Postgres text refuses (the row would be lost).
func auditText(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("api: marshal %T: %v", v, err))
	}
	return b
}
