package toolspec

import (
	"fmt"

	"github.com/idemgate/idemgate/internal/core"
)

// WrapTx returns a gate store transaction as an effect sees it: each
// engine driver's transaction is a Tx itself (its Exec, QueryRow and
// Engine run on the engine's own transaction).
func WrapTx(tx core.Tx) (Tx, error) {
	t, ok := tx.(Tx)
	if !ok {
		return nil, fmt.Errorf("toolspec: transaction %T is not a tool transaction", tx)
	}
	return t, nil
}
