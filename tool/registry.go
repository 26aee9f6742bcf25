package tool

import (
	"fmt"
	"slices"
	"sort"

	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
)

// Scopes that every deployment knows besides its tools' own.
const (
	// ScopeOperationsRead reads operations (get_operation, REST status).
	ScopeOperationsRead = tokenspec.ScopeOperationsRead
	// ScopeOpsAdmin re-drives operations and, for the operator tenant,
	// opens River UI.
	ScopeOpsAdmin = tokenspec.ScopeOpsAdmin
)

// Registry is the set of tools one deployment serves. Build it once at
// start with Add; it is read-only afterwards and safe for concurrent use.
type Registry struct {
	specs map[string]*Spec
	order []string
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{specs: map[string]*Spec{}}
}

// Add registers tools. It returns an error naming the first invalid
// declaration or a duplicate name.
func (r *Registry) Add(tools ...Tool) error {
	for _, t := range tools {
		spec, err := t.Spec()
		if err != nil {
			return err
		}
		if err := r.AddSpec(spec); err != nil {
			return err
		}
	}
	return nil
}

// AddSpec registers an already derived tool, such as one of another
// registry's.
func (r *Registry) AddSpec(spec *Spec) error {
	if spec == nil {
		return fmt.Errorf("tool: AddSpec: nil spec")
	}
	if _, dup := r.specs[spec.Name]; dup {
		return fmt.Errorf("tool %s: registered twice", spec.Name)
	}
	r.specs[spec.Name] = spec
	r.order = append(r.order, spec.Name)
	return nil
}

// MustAdd is Add that panics: for declarations fixed at compile time.
func (r *Registry) MustAdd(tools ...Tool) *Registry {
	if err := r.Add(tools...); err != nil {
		panic(err)
	}
	return r
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
func (r *Registry) Policies() []gate.Policy {
	out := []gate.Policy{}
	for _, s := range r.Mutations() {
		out = append(out, *s.Policy)
	}
	return out
}

// Scopes returns every scope a token may be granted: the tools' own plus
// operations:read and ops:admin, sorted.
func (r *Registry) Scopes() []string {
	out := []string{ScopeOperationsRead, ScopeOpsAdmin}
	for _, s := range r.specs {
		if !slices.Contains(out, s.Scope) {
			out = append(out, s.Scope)
		}
	}
	sort.Strings(out)
	return out
}
