package app_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	toolapi "github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/tools"
)

// intentKey is the downstream key, generation gen, that a call of tool
// with args (idempotency_key included) by tenant gets under secret: the
// intent key of its tenant, tool, key and fingerprint (the tool's volatile
// fields left out), as the gate computes it.
func intentKey(t *testing.T, secret, tenant, tool string, args map[string]any, gen int) string {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	decoded, err := core.DecodeArgs(raw)
	require.NoError(t, err)
	decls := map[string]toolapi.Tool{
		"refund_order": tools.RefundOrder(&tools.Deps{}), "apply_credit": tools.ApplyCredit(&tools.Deps{}),
		"reset_seat": tools.ResetSeat(&tools.Deps{}), "send_password_reset": tools.SendPasswordReset(&tools.Deps{}),
	}
	require.Contains(t, decls, tool)
	spec, err := tools.Spec(decls[tool])
	require.NoError(t, err)
	volatile := spec.Policy.VolatileFields
	_, hash, err := core.Fingerprint(decoded, volatile)
	require.NoError(t, err)
	key, _ := args["idempotency_key"].(string)
	ik := core.NewIntentKeyer([]byte(secret)).Key(tenant, tool, key, hash)
	require.NotEmpty(t, ik, "a secret keys the intent")
	return core.DownstreamKey(ik, "", 0, gen)
}
