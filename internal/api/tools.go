package api

import (
	"context"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Scopes of the api's own routes.
const (
	ScopeOperationsRead = domain.ScopeOperationsRead
	ScopeOpsAdmin       = tokenspec.ScopeOpsAdmin
)

// GetOperation is the built-in read tool that answers an operation's
// status by tool and key.
const GetOperation = "get_operation"

// getOperationArgs are get_operation's arguments.
type getOperationArgs struct {
	Tool           string `json:"tool" jsonschema:"The mutating tool the key was used with."`
	IdempotencyKey string `json:"idempotency_key" jsonschema:"The key the mutation was called with: 8 to 128 characters of [A-Za-z0-9._:-]."`
}

// getOperationSpec declares get_operation; its tool argument is one of
// the registry's mutations.
func (s *Server) getOperationSpec() (*toolspec.Spec, error) {
	spec, err := derive(&gate.Read[getOperationArgs, vocab.Operation]{
		Name:  GetOperation,
		Title: "Get an operation by key",
		Description: "The status and outcome of a mutation, by its tool and idempotency_key. " +
			"Needs the scope operations:read or the mutation's own.",
		Scope: ScopeOperationsRead,
		Handle: func(ctx context.Context, _ gate.Tx, caller domain.Caller, a *getOperationArgs) (*vocab.Operation, error) {
			return s.operation(ctx, vocab.Actor{TenantID: caller.TenantID, UserID: caller.UserID}, a.Tool, a.IdempotencyKey)
		},
	})
	if err != nil {
		return nil, err
	}
	return spec, withToolEnum(spec, s.tools.MutationNames())
}

// checkToolName refuses a tool argument that names no mutating tool;
// optional lets it be absent.
func (s *Server) checkToolName(args map[string]any, optional bool) error {
	name, _ := args["tool"].(string)
	if name == "" && optional {
		return nil
	}
	if spec, ok := s.tools.Get(name); !ok || !spec.Mutating {
		return vocab.Errorf(vocab.CodeInvalidArgument, "tool", "must name a mutating tool, got %q", name)
	}
	return nil
}

// toolByName returns a tool of the registry, or a built-in read.
func (s *Server) toolByName(name string) (*toolspec.Spec, bool) {
	switch name {
	case GetOperation:
		return s.getOperation, true
	case ListOperations:
		return s.listOperationsTool, true
	}
	return s.tools.Get(name)
}

// allTools lists every tool the server serves.
func (s *Server) allTools() []*toolspec.Spec {
	return append(s.tools.All(), s.getOperation, s.listOperationsTool)
}

// annotations are the MCP hints of a tool, set truthfully: reads are
// read-only; mutations are destructive but idempotent (per key), and an
// in-transaction effect touches nothing outside idemgate's database.
func annotations(spec *toolspec.Spec) *mcp.ToolAnnotations {
	if !spec.Mutating {
		return &mcp.ToolAnnotations{Title: spec.Title, ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
	}
	return &mcp.ToolAnnotations{Title: spec.Title, DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(!spec.InTx)}
}

func ptr[T any](v T) *T { return &v }

// derive returns the spec of one of the api's own tools.
func derive(t gate.Tool) (*toolspec.Spec, error) {
	reg := gate.NewRegistry()
	if err := reg.Add(t); err != nil {
		return nil, err
	}
	return toolspec.Of(reg).All()[0], nil
}
