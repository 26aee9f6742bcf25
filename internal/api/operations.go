package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// ListOperations is the built-in read tool that lists the caller's
// tenant's operations, newest first.
const ListOperations = "list_operations"

// Page sizes of list_operations, GET /v1/operations and tasks/list.
const (
	// DefaultPageSize is the page size when none is asked for.
	DefaultPageSize = 20
	// MaxPageSize is the largest page size.
	MaxPageSize = 100
)

// listOperationsArgs are list_operations' arguments.
type listOperationsArgs struct {
	Tool   string `json:"tool,omitempty" jsonschema:"Only operations of this mutating tool."`
	Status string `json:"status,omitempty" jsonschema:"Only operations in this status." idem:"enum=queued|running|succeeded|failed"`
	Limit  int64  `json:"limit,omitempty" jsonschema:"Page size, 1 to 100; default 20." idem:"min=1,max=100"`
	Cursor string `json:"cursor,omitempty" jsonschema:"The next_cursor of the previous page, as it was answered; absent for the first page." idem:"maxlen=200"`
	Arg    string `json:"arg,omitempty" jsonschema:"Only operations whose argument NAME has VALUE, as NAME=VALUE (order_id=ord_9f2); a number compares as its digits." idem:"maxlen=300"`
	// IdempotencyKey is accepted and ignored, as by every read.
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"Accepted and ignored: reads are naturally idempotent." idem:"text"`
}

// OperationPage is a page of operations, newest first.
type OperationPage struct {
	Operations []*vocab.Operation `json:"operations"`
	// NextCursor, when set, asks for the next (older) page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// listOperationsSpec declares list_operations; its tool argument is one of
// the registry's mutations.
func (s *Server) listOperationsSpec() (*toolspec.Spec, error) {
	spec, err := derive(&gate.Read[listOperationsArgs, OperationPage]{
		Name:        ListOperations,
		Title:       "List operations",
		Description: "The caller's operations, newest first, optionally of one tool, status or argument value (arg order_id=ord_9f2); pass next_cursor as cursor for the next page.",
		Scope:       ScopeOperationsRead,
		Handle: func(ctx context.Context, _ gate.Tx, caller domain.Caller, a *listOperationsArgs) (*OperationPage, error) {
			p := &core.ClaimListNewestParams{TenantID: caller.TenantID, Tool: a.Tool, Status: vocab.Status(a.Status), Limit: int(a.Limit)}
			var err error
			if p.ArgName, p.ArgValue, err = argFilter(a.Arg); err != nil {
				return nil, err
			}
			return s.listOperations(ctx, p, a.Cursor)
		},
	})
	if err != nil {
		return nil, err
	}
	return spec, withToolEnum(spec, s.tools.MutationNames())
}

// withToolEnum publishes names as the enum of the spec's tool argument.
func withToolEnum(spec *toolspec.Spec, names []string) error {
	var schema map[string]any
	if err := json.Unmarshal(spec.InputSchema, &schema); err != nil {
		return err
	}
	props, _ := schema["properties"].(map[string]any)
	toolProp, _ := props["tool"].(map[string]any)
	if toolProp == nil {
		return fmt.Errorf("api: %s's schema has no tool property", spec.Name)
	}
	toolProp["enum"] = names
	var err error
	spec.InputSchema, err = json.Marshal(schema)
	return err
}

// listOperations reads one page of the tenant's operations.
func (s *Server) listOperations(ctx context.Context, p *core.ClaimListNewestParams, cursor string) (*OperationPage, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultPageSize
	}
	limit = min(limit, MaxPageSize)
	after, err := decodeCursor(cursor)
	if err != nil {
		return nil, err
	}
	// One row more than the page says whether another page follows.
	q := *p
	q.After, q.Limit = after, limit+1
	claims, err := s.gate.Store().ClaimListNewest(ctx, &q)
	if err != nil {
		return nil, err
	}
	page := &OperationPage{Operations: make([]*vocab.Operation, 0, min(len(claims), limit))}
	for i, c := range claims {
		if i == limit {
			last := claims[limit-1]
			page.NextCursor = encodeCursor(&core.ClaimCursor{CreatedAt: last.CreatedAt, ID: last.ID})
			break
		}
		page.Operations = append(page.Operations, s.linkApproval(c.Operation()))
	}
	return page, nil
}

// argFilter reads list_operations' arg, NAME=VALUE; "" filters nothing.
func argFilter(arg string) (name, value string, err error) {
	if arg == "" {
		return "", "", nil
	}
	name, value, ok := strings.Cut(arg, "=")
	if !ok || !core.ValidArgName(name) {
		return "", "", vocab.Errorf(vocab.CodeInvalidArgument, "arg",
			"want NAME=VALUE with NAME an argument name of 1 to 64 characters [a-z0-9_], as order_id=ord_9f2; got %q", clip(arg))
	}
	return name, value, nil
}

// encodeCursor makes an opaque cursor of a position.
func encodeCursor(c *core.ClaimCursor) string {
	raw := c.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + strconv.FormatInt(c.ID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeCursor reads a cursor made by encodeCursor; "" is the first page.
func decodeCursor(s string) (*core.ClaimCursor, error) {
	if s == "" {
		return nil, nil
	}
	bad := vocab.Errorf(vocab.CodeInvalidArgument, "cursor", "is not a cursor this server made: pass next_cursor as it was answered")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	at, id, ok := strings.Cut(string(raw), "|")
	if !ok {
		return nil, bad
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, bad
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return nil, bad
	}
	return &core.ClaimCursor{CreatedAt: t, ID: n}, nil
}

// describe is a claim as answered by get_operation, its REST twin and
// task status: the operation with, while it waits for a retry, when its
// job runs next.
func (s *Server) describe(ctx context.Context, c *core.Claim) *vocab.Operation {
	return s.withNextAttempt(ctx, s.linkApproval(c.Operation()))
}

// withNextAttempt sets a queued op's NextAttemptAt from its job, and
// returns op.
func (s *Server) withNextAttempt(ctx context.Context, op *vocab.Operation) *vocab.Operation {
	if op == nil || op.Status != vocab.StatusQueued || op.JobID == 0 || op.NextAttemptAt != nil {
		return op
	}
	job, err := s.gate.Store().JobGet(ctx, &core.JobGetParams{ID: op.JobID})
	switch {
	case err == nil:
		op.NextAttemptAt = job.NextRunAt
	case !errors.Is(err, vocab.ErrNotFound):
		// The status stands without it.
		s.logger.WarnContext(ctx, "next attempt not read", "operation_id", op.OperationID, "job_id", op.JobID, "error", err)
	}
	return op
}

// restListOperations is GET /v1/operations?tool=&status=&limit=&cursor=&arg=.
func (s *Server) restListOperations(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFromContext(r.Context())
	def, _ := s.toolByName(ListOperations)
	args := map[string]any{}
	q := r.URL.Query()
	for _, name := range []string{"tool", "status", "cursor", "arg"} {
		if v := q.Get(name); v != "" {
			args[name] = v
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			c := &call{actor: actor, requestID: RequestIDFromContext(r.Context()), clientRequestID: ClientRequestIDFromContext(r.Context()), tool: def}
			cerr := s.deny(r.Context(), c, "", vocab.Errorf(vocab.CodeInvalidArgument, "limit", "must be an integer from 1 to %d, got %q", MaxPageSize, clip(v)), time.Now())
			writeProblem(w, r, statusOf(cerr), cerr)
			return
		}
		args["limit"] = n
	}
	c := &call{actor: actor, requestID: RequestIDFromContext(r.Context()), clientRequestID: ClientRequestIDFromContext(r.Context()), tool: def, raw: mustJSON(args)}
	out, cerr := s.read(r.Context(), c)
	if cerr != nil {
		writeProblem(w, r, statusOf(cerr), cerr)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// clip shortens client text quoted in a message.
func clip(s string) string {
	if len(s) > 40 {
		return auditText(s, 40) + "…"
	}
	return s
}
