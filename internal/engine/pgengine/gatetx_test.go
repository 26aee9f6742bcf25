package pgengine_test

import (
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// The engine's transaction is the gate.Tx effects see (and the assembly's
// toolspec.Tx), though the engine imports neither.
var (
	_ gate.Tx     = (*pgengine.Tx)(nil)
	_ toolspec.Tx = (*pgengine.Tx)(nil)
)
