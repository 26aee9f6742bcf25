package gate

import (
	"github.com/idemgate/idemgate/internal/toolspec"
)

// Registry is the set of tools one deployment serves. Build it once at
// start with Add; it is read-only afterwards and safe for concurrent use.
type Registry struct {
	inner *toolspec.Registry
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	r := &Registry{inner: toolspec.NewRegistry()}
	toolspec.Track(r, r.inner)
	return r
}

// Add registers tools. It returns an error naming the first invalid
// declaration or a duplicate name.
func (r *Registry) Add(tools ...Tool) error {
	for _, t := range tools {
		spec, err := t.spec()
		if err != nil {
			return err
		}
		if err := r.inner.Add(spec); err != nil {
			return err
		}
	}
	return nil
}

// MustAdd is Add that panics: for declarations fixed at compile time.
func (r *Registry) MustAdd(tools ...Tool) *Registry {
	if err := r.Add(tools...); err != nil {
		panic(err)
	}
	return r
}

// ToolScopes returns the scopes an agent's token needs to call every tool
// of r: each tool's Scope, and domain.ScopeOperationsRead, which list_operations
// needs (get_operation also accepts the polled mutation's own scope).
// Sorted, without repeats, and never an operator's scope such as
// ops:admin, which re-drives and cancels any operation of the tenant.
//
// It is the natural argument to Service.CreateToken for an agent:
//
//	secret, err := svc.CreateToken(ctx, tenant, user, reg.ToolScopes()...)
func (r *Registry) ToolScopes() []string {
	return r.inner.ToolScopes()
}
