// Package toolspec is what the assembly reads of a tool declaration: the
// derived Spec with its type-erased Effect, the Registry of one deployment,
// and the effect errors with what they say happened downstream. Package
// tool builds these from its public declarations; nothing here is part of
// the public API.
package toolspec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"
	"weak"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Row is one row of Tx.QueryRow. It is the same type as gate.Row.
type Row = interface {
	Scan(dest ...any) error
}

// Rows are the rows of Tx.Query. It is the same type as gate.Rows.
type Rows = interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Tx is the completing transaction as an effect sees it; its method set is
// gate.Tx's, so that a value of either is the other.
type Tx interface {
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
	Engine() string
}

// Caller is who calls: domain.Caller.
type Caller = domain.Caller

// Spec is what the assembly derives from a declaration.
type Spec struct {
	Name        string
	Title       string
	Description string
	Scope       string
	// Mutating is true for a Mutation.
	Mutating bool
	// InTx is true for an in-transaction mutation.
	InTx bool
	// Provider labels the downstream in metrics.
	Provider string
	// InputSchema and OutputSchema are the published JSON Schemas.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// Policy is the gate policy of a mutation.
	Policy *core.Policy
	// Effect runs a mutation's effect (the worker calls it).
	Effect Effect
	// Serve answers a read tool's call with validated arguments; tx is a
	// read-only transaction begun on first use.
	Serve func(ctx context.Context, tx Tx, caller Caller, args json.RawMessage) (any, error)
	// Check validates decoded arguments (see Validate).
	Check func(args map[string]any) error
	// NeedsApproval, set for a mutation with an Approval, says whether a
	// call with validated arguments waits for a person's approval; tx is
	// a read-only transaction. ApprovalWindow is how long it may wait.
	NeedsApproval  func(ctx context.Context, tx Tx, caller Caller, args json.RawMessage) (bool, error)
	ApprovalWindow time.Duration
	// Review, set for a mutation with a Review, runs on the same read-only
	// transaction once NeedsApproval said yes: the summary the approver
	// reads, or the error that refuses the call before anyone is asked (a
	// *vocab.Error or a definitive *Error refuses it with its code).
	Review func(ctx context.Context, tx Tx, caller Caller, args json.RawMessage) (string, error)
}

// Validate checks decoded arguments (core.DecodeArgs) against the tool's
// schema and its Check: unknown, missing, mistyped and out-of-range
// arguments are *domain.Error with code invalid_argument and the field.
// The idempotency key is left to the gate, which has its own codes.
func (s *Spec) Validate(args map[string]any) error {
	if s.Check == nil {
		return nil
	}
	return s.Check(args)
}

// Effect is a mutation's effect with its types erased, for the worker.
type Effect interface {
	// Apply runs an in-transaction effect inside tx and returns the result.
	Apply(ctx context.Context, tx Tx, c *core.Claim) (json.RawMessage, error)
	// Call runs an external effect outside any transaction.
	Call(ctx context.Context, c *core.Claim) (json.RawMessage, error)
	// Record writes an external effect's rows in the completing transaction.
	Record(ctx context.Context, tx Tx, c *core.Claim, result json.RawMessage) error
}

// Outcome is what an effect's error says about what happened downstream.
type Outcome int

// The outcomes; tool's NothingHappened, Happened, Transient and Unknown
// make each.
const (
	OutcomeTransient Outcome = iota
	OutcomeNothingHappened
	OutcomeHappened
	OutcomeUnknown
)

// Error is an effect's failure with its code and what it says happened.
// Any other error from an effect is transient.
type Error struct {
	Outcome Outcome
	Info    vocab.ErrorInfo
	// Err is the cause, for logs (never shown to clients).
	Err error
}

// Error implements error.
func (e *Error) Error() string { return string(e.Info.Code) + ": " + e.Info.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Definitive reports whether the operation ends failed (no retry).
func (e *Error) Definitive() bool { return e.Outcome != OutcomeTransient }

// AsError returns err's *Error, if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Registry is the set of tools one deployment serves. It is built once at
// start and read-only afterwards, safe for concurrent use.
type Registry struct {
	specs map[string]*Spec
	order []string
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{specs: map[string]*Spec{}}
}

// Add registers a derived tool; a second tool of the same name is an error.
func (r *Registry) Add(spec *Spec) error {
	if spec == nil {
		return fmt.Errorf("tool: nil spec")
	}
	if _, dup := r.specs[spec.Name]; dup {
		return fmt.Errorf("tool %s: registered twice", spec.Name)
	}
	r.specs[spec.Name] = spec
	r.order = append(r.order, spec.Name)
	return nil
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (*Spec, bool) {
	s, ok := r.specs[name]
	return s, ok
}

// All returns every tool in registration order.
func (r *Registry) All() []*Spec {
	out := make([]*Spec, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, r.specs[n])
	}
	return out
}

// Mutations returns the mutating tools in registration order.
func (r *Registry) Mutations() []*Spec {
	out := []*Spec{}
	for _, s := range r.All() {
		if s.Mutating {
			out = append(out, s)
		}
	}
	return out
}

// MutationNames returns the mutating tools' names in registration order.
func (r *Registry) MutationNames() []string {
	out := []string{}
	for _, s := range r.Mutations() {
		out = append(out, s.Name)
	}
	return out
}

// Policies returns the gate policies of the mutating tools.
func (r *Registry) Policies() []core.Policy {
	out := []core.Policy{}
	for _, s := range r.Mutations() {
		out = append(out, *s.Policy)
	}
	return out
}

// ToolScopes returns the scopes of the registry's tools, operations:read
// included and operator scopes excluded, sorted.
func (r *Registry) ToolScopes() []string {
	out := []string{tokenspec.ScopeOperationsRead}
	for _, s := range r.specs {
		if !slices.Contains(out, s.Scope) {
			out = append(out, s.Scope)
		}
	}
	sort.Strings(out)
	return out
}

// Scopes returns every scope a token may be granted: ToolScopes plus the
// operators' ops:admin and, when a tool asks for approval, the approvers'
// approvals:decide, sorted.
func (r *Registry) Scopes() []string {
	out := append(r.ToolScopes(), tokenspec.ScopeOpsAdmin)
	for _, s := range r.specs {
		if s.NeedsApproval != nil {
			out = append(out, tokenspec.ScopeApprovalsDecide)
			break
		}
	}
	sort.Strings(out)
	return out
}

// registries maps each public *gate.Registry (weakly: a registry no longer
// referenced is forgotten) to its specs. Package gate records each registry
// it creates (Track); the assembly and the test kit look it up (Of). It is
// the one link between the public declaration API and the internals, and
// it needs no init.
var registries sync.Map // weak.Pointer[T] → *Registry

// Track records inner as the specs of key, until key is collected.
func Track[T any](key *T, inner *Registry) {
	wp := weak.Make(key)
	registries.Store(wp, inner)
	runtime.AddCleanup(key, func(wp weak.Pointer[T]) { registries.Delete(wp) }, wp)
}

// Of returns the specs Track recorded for key (a *gate.Registry). It panics
// on a key it never recorded: a programmer's mistake.
func Of[T any](key *T) *Registry {
	if key != nil {
		if r, ok := registries.Load(weak.Make(key)); ok {
			return r.(*Registry)
		}
	}
	panic(fmt.Sprintf("toolspec: %T is not a registry made by gate.NewRegistry", key))
}
