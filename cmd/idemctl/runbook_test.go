package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// runbookCommands are the idemctl commands of docs/operators.md's runbook
// "did we refund ord_9f2 twice?", as written there.
func runbookCommands(t *testing.T) [][]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operators.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "### Runbook: \"did we refund ord_9f2 twice?\"")
	require.True(t, ok, "docs/operators.md has the runbook")
	section, _, _ = strings.Cut(section, "\n### ")
	var out [][]string
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "idemctl "); ok {
			out = append(out, strings.Fields(rest))
		}
	}
	require.Len(t, out, 3, "the runbook's three commands: reconcile --order, op list --arg, op get")
	return out
}

// The runbook answers the 3am question from the tools: an order refunded
// under two keys is reported refunded twice and lists two operations, one
// refunded once with its client's retries once, and one operation.
func TestRunbookCommands(t *testing.T) {
	t.Parallel()
	cmds := runbookCommands(t)
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		b.seedOrders(t)
		refund := func(key, order string) *coretest.ClaimOpts {
			return &coretest.ClaimOpts{Key: key, Args: map[string]any{"order_id": order, "amount_cents": json.Number("1500")}}
		}
		// ord_9f2 twice: the agent minted a second key for the same refund
		// (a deployment without the duplicate guard, or a confirmed one),
		// and Stripe reported both refunds.
		twiceA := b.refundOf(t, "runbook-key-a", "ord_9f2", "re_runbook_a")
		twiceB := b.refundOf(t, "runbook-key-b", "ord_9f2", "re_runbook_b")
		b.stripeSays(t, "evt_runbook_a", "re_runbook_a", "ch_9f2", twiceA.OperationID)
		b.stripeSays(t, "evt_runbook_b", "re_runbook_b", "ch_9f2", twiceB.OperationID)
		// ord_once once, its call retried three times under its key.
		once := b.refundOf(t, "runbook-key-c", "ord_once", "re_runbook_c")
		for range 3 {
			again := coretest.Claim(ctx, t, b.ops.Gate, refund("runbook-key-c", "ord_once"))
			require.Equal(t, once.OperationID, again.Claim.OperationID)
			require.NotEqual(t, vocab.OutcomeAccepted, again.Outcome)
		}
		b.stripeSays(t, "evt_runbook_c", "re_runbook_c", "ch_once", once.OperationID)

		list := func(args []string) []map[string]any {
			t.Helper()
			res := idemctl(ctx, t, b.dbURL, args...)
			require.Equal(t, exitOK, res.code, res.stderr)
			return jsonLines(t, res.stdout)
		}
		reconciled := list(cmds[0])
		require.Len(t, reconciled, 1)
		require.Equal(t, true, reconciled[0]["refunded_twice"], reconciled[0]["summary"])
		require.Contains(t, reconciled[0]["summary"], "ord_9f2: 2 refunds succeeded at Stripe for 2 operations under 2 keys")
		onceCmd := strings.Fields(strings.ReplaceAll(strings.Join(cmds[0], " "), "ord_9f2", "ord_once"))
		reconciled = list(onceCmd)
		require.Equal(t, false, reconciled[0]["refunded_twice"], reconciled[0]["summary"])
		require.Contains(t, reconciled[0]["summary"], "ord_once: 1 refund succeeded at Stripe for 1 operation under 1 key")

		lines := list(cmds[1])
		require.Len(t, lines, 2, "refunded twice: two operations under two keys")
		keys := []any{lines[0]["idempotency_key"], lines[1]["idempotency_key"]}
		require.ElementsMatch(t, []any{"runbook-key-a", "runbook-key-b"}, keys)
		onceCmd = strings.Fields(strings.ReplaceAll(strings.Join(cmds[1], " "), "ord_9f2", "ord_once"))
		lines = list(onceCmd)
		require.Len(t, lines, 1, "refunded once: its retries are that one operation")
		require.Equal(t, once.OperationID, lines[0]["operation_id"])

		getCmd := strings.Fields(strings.ReplaceAll(strings.Join(cmds[2], " "), "KEY", "runbook-key-a"))
		res := idemctl(ctx, t, b.dbURL, getCmd...)
		require.Equal(t, exitOK, res.code, res.stderr)
		var op map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &op))
		require.Equal(t, twiceA.OperationID, op["operation_id"])
		require.NotEmpty(t, op["audit"], "op get shows the audit trail")
	})
}
