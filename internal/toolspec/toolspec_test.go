package toolspec_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// TestOfFindsTheRegistrysSpecs: a registry made by gate.NewRegistry leads
// to its specs; one made otherwise is a programmer's mistake, named.
func TestOfFindsTheRegistrysSpecs(t *testing.T) {
	reg := gate.NewRegistry()
	a, b := toolspec.Of(reg), toolspec.Of(reg)
	require.NotNil(t, a)
	require.Same(t, a, b)
	require.NotSame(t, a, toolspec.Of(gate.NewRegistry()), "each registry has its own specs")
	require.PanicsWithValue(t, "toolspec: *gate.Registry is not a registry made by gate.NewRegistry", func() {
		toolspec.Of(&gate.Registry{})
	})
}
