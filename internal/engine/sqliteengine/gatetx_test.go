package sqliteengine_test

import (
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// The engine's transaction is the gate.Tx effects see (and the assembly's
// toolspec.Tx), though the engine imports neither.
var (
	_ gate.Tx     = (*sqliteengine.Tx)(nil)
	_ toolspec.Tx = (*sqliteengine.Tx)(nil)
)
