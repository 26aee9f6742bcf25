package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestApprovalSummaryAndPreCheck: refund_order's Review, on both engines.
// A refund that can never succeed (more than the order's total minus what
// is already refunded) is refused at once with amount_exceeds_refundable:
// no operation waits, no notice job is inserted. A possible one waits, and
// its answer, GET /v1/approvals/{id} and the notice mail carry the summary
// as of the request (currency, total, already refunded), with the agent's
// reason apart as its own words.
func TestApprovalSummaryAndPreCheck(t *testing.T) {
	t.Parallel()
	for _, engineName := range []string{"postgres", "sqlite"} {
		t.Run(engineName, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setupNotices(t, engineName)
			const decider = "idg_summary_decider_token_0123456789abcdef"
			_, err := b.store.(interface {
				Seed(context.Context, *store.SeedFile) (*store.SeedResult, error)
			}).Seed(ctx, &store.SeedFile{Tokens: []store.SeedToken{
				{Tenant: "acme", User: "finance", Scopes: []string{"approvals:decide"}, Token: decider}}})
			require.NoError(t, err)
			acme := connect(t, b.url, tokenAcme)
			awaiting := func() int {
				cs, err := b.store.ClaimListNewest(ctx, &core.ClaimListNewestParams{TenantID: "acme", Status: vocab.StatusAwaitingApproval, Limit: 100})
				require.NoError(t, err)
				return len(cs)
			}

			// 5.00 of the order's 50.00 refunded at once (under the threshold).
			small, isErr := callTool(t, acme, "refund_order", refund("summary-key-0001", 500))
			require.False(t, isErr, "%+v", small.Error)
			require.Equal(t, vocab.StatusSucceeded, small.Operation.Status)

			// 110.00 of the 45.00 still refundable: refused at once, with the
			// worker's own code; nothing waits and nobody is mailed.
			for _, amount := range []int{11000, 4501} {
				impossible, isErr := callTool(t, acme, "refund_order", refund("summary-key-0002", amount))
				require.True(t, isErr, "%+v", impossible)
				require.Equal(t, vocab.CodeAmountExceedsRefundable, impossible.Error.Code, "%+v", impossible.Error)
				require.Contains(t, impossible.Error.Message, "4500 still refundable")
			}
			require.Zero(t, awaiting(), "no operation awaits approval")
			require.Zero(t, b.noticeJobs("", ""), "no notice job")
			// An unknown order is refused at once too.
			unknown, isErr := callTool(t, acme, "refund_order", map[string]any{"order_id": "ord_nope", "amount_cents": 1500, "idempotency_key": "summary-key-0003"})
			require.True(t, isErr, "%+v", unknown)
			require.Equal(t, vocab.Code("not_found"), unknown.Error.Code)
			require.Zero(t, awaiting())

			// A possible one waits, with its summary as of the request.
			const reason = "Customer says: <b>parcel</b> never came"
			args := refund("summary-key-0004", 1500)
			args["reason"] = reason
			first, isErr := callTool(t, acme, "refund_order", args)
			require.False(t, isErr, "%+v", first.Error)
			require.Equal(t, vocab.StatusAwaitingApproval, first.Operation.Status)
			const summary = "Refund 15.00 USD of order ord_9f2 (total 50.00 USD, 5.00 already refunded)"
			require.Equal(t, summary, first.Operation.Approval.Summary)
			require.Equal(t, 1, awaiting())
			op := first.Operation.OperationID

			// GET /v1/approvals/{id}: the summary, and the reason only in the
			// arguments, named as not fingerprinted.
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/v1/approvals/"+op, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+decider)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var a struct {
				Summary          string            `json:"summary"`
				Args             map[string]any    `json:"args"`
				NotFingerprinted []string          `json:"not_fingerprinted"`
				Extra            map[string]string `json:"-"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
			require.Equal(t, summary, a.Summary)
			require.Equal(t, []string{"reason"}, a.NotFingerprinted)
			require.Equal(t, reason, a.Args["reason"])
			require.NotContains(t, a.Summary, "parcel", "the agent's words are not in the summary")

			// The notice mail: the summary line, and the reason apart.
			b.awaitNotice(t, op)
			var ms []mailpit.Message
			require.Eventually(t, func() bool {
				ms, err = b.mail.ByMessageID(ctx, noticeID(op))
				return err == nil && len(ms) > 0
			}, 30*time.Second, 50*time.Millisecond)
			body, err := b.mail.Body(ctx, ms[0].ID)
			require.NoError(t, err)
			body = strings.ReplaceAll(body, "\r\n", "\n")
			require.Contains(t, body, "\nSummary:       "+summary+"\n")
			require.Contains(t, body, "\nThe agent's words (not fingerprinted, not checked):\n  reason: \""+reason+"\"\n")
		})
	}
}
