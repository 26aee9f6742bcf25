package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestOperatorCancelOrDeleteInRiverUIIsRedrivable: an operator cancels (or
// deletes) a queued refund's job through River UI's API, as its buttons do.
// The reaper ends the operation with a code that names what happened, not
// the owner's `cancelled`; the agent's retry with the same key is told so;
// an operator's dry run says it would re-drive and changes nothing; the
// re-drive runs it on a fresh job with the same downstream key, and the
// test Stripe holds exactly one refund of it.
func TestOperatorCancelOrDeleteInRiverUIIsRedrivable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		action string
		code   vocab.Code
		says   string
	}{
		{"cancel", vocab.CodeJobCancelledByOperator, "cancelled in River by an operator"},
		{"delete", vocab.CodeJobVanished, "deleted from River"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			t.Parallel()
			enginetest.Run(t, func(t *testing.T, engine string) {
				ctx := context.Background()
				stripeSrv, stripeHTTP := stripetest.Start(t, nil)
				stripeSrv.AddCharge("ch_opcancel", 50_000, "usd")
				d := enginetest.New(t, engine, &enginetest.Options{MaxConns: 30})
				seed := seedFile()
				rows := seed.Rows.(*tools.Seed)
				rows.Orders = append(rows.Orders, tools.SeedOrder{Tenant: "acme", OrderID: "ord_opcancel", ChargeID: "ch_opcancel", AmountCents: 50_000, Currency: "usd"})
				_, err := d.Store.Seed(ctx, seed)
				require.NoError(t, err)
				cfg := opsConfig(d, opsEnv)
				cfg.Wait = 0
				cfg.StripeAPIBase = stripeHTTP.URL
				cfg.InflightTimeout = 10 * time.Second
				cfg.ReaperInterval = 200 * time.Millisecond
				url := runAPIAndWorker(t, cfg, d)
				session := connect(t, url, tokenAcme)
				riverUI := url + ops.RiverUIPath + "/api"
				ui := basicAuth(opsUser, opsPassword)

				// The operator pauses the queue (River UI's API), so that the
				// refund stays queued. Until the worker applies the pause it
				// may fetch a job first; then the operator tries the next one.
				// River knows the queue once the worker's producer has
				// started.
				require.Eventually(t, func() bool {
					resp, _ := opsDo(t, http.MethodPut, riverUI+"/queues/idemgate/pause", ui, "", nil)
					return resp.StatusCode < 300
				}, 60*time.Second, 50*time.Millisecond, "River UI pauses the queue")
				var key string
				var args map[string]any
				var jobID int
				for i := 0; i < 30 && key == ""; i++ {
					k := fmt.Sprintf("opcancel-%s-%d", tc.action, i)
					a := map[string]any{"order_id": "ord_opcancel", "amount_cents": 700, "idempotency_key": k}
					callPatiently(t, session, "refund_order", a)
					id := d.Count(t, `SELECT job_id FROM idempotency_claims WHERE idempotency_key = $1`, k)
					resp, body := opsDo(t, http.MethodPost, riverUI+"/jobs/"+tc.action, ui, fmt.Sprintf(`{"ids":["%d"]}`, id), nil)
					if resp.StatusCode != http.StatusOK {
						continue // a worker fetched it first: River does not delete a running job
					}
					require.Equal(t, http.StatusOK, resp.StatusCode, body)
					gone := d.Count(t, `SELECT count(*) FROM river_job WHERE id = $1`, id) == 0
					cancelled := d.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'cancelled'`, id) == 1
					if tc.action == "delete" && gone || tc.action == "cancel" && cancelled {
						key, args, jobID = k, a, id
					}
				}
				require.NotEmpty(t, key, "a queued refund's job was %sd in River UI", tc.action)
				resp, body := opsDo(t, http.MethodPut, riverUI+"/queues/idemgate/resume", ui, "", nil)
				require.True(t, resp.StatusCode < 300, body)

				// The reaper ends it with the code that says what happened.
				failed := awaitPatiently(t, session, key, vocab.StatusFailed)
				require.Equal(t, tc.code, failed.Error.Code)
				require.Contains(t, failed.Error.Message, tc.says)
				require.Contains(t, failed.Error.Message, "its owner did not cancel it, and an operator can re-drive it")

				// The agent retries with the same key: the truth, replayed.
				replay := callPatiently(t, session, "refund_order", args)
				require.Contains(t, replay, string(tc.code), replay)
				require.Contains(t, replay, "an operator can re-drive it", replay)
				require.NotContains(t, replay, `"code":"cancelled"`, replay)

				// An operator: a dry run first, then the re-drive.
				o := newOps(t, d)
				params := &ops.RedriveParams{TenantID: "acme", Tool: "refund_order", Key: key, Operator: "alice", Reason: "cancelled in River UI by mistake", DryRun: true}
				// The other jobs of the queue run meanwhile: this operation's
				// row and audit trail are what a dry run must leave alone.
				state := func() []string {
					return append(d.Rows(t, `SELECT * FROM idempotency_claims WHERE idempotency_key = $1`, key),
						strconv.Itoa(d.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = $1`, key)))
				}
				before := state()
				line, err := o.Redriver.Redrive(ctx, params)
				require.NoError(t, err)
				require.Equal(t, ops.ActionWouldRedrive, line.Action)
				require.True(t, line.FreshJob, "River will not run that job again")
				require.False(t, line.NextGeneration)
				require.Equal(t, before, state(), "a dry run changes nothing")
				params.DryRun = false
				line, err = o.Redriver.Redrive(ctx, params)
				require.NoError(t, err)
				require.Equal(t, ops.ActionRedriven, line.Action)
				require.NotEqual(t, int64(jobID), line.JobID)
				downstream := intentKey(t, strings.Repeat("s", 32), "acme", "refund_order", args, 0)
				require.Equal(t, downstream, line.DownstreamKey, "the downstream key stays")

				op := awaitPatiently(t, session, key, vocab.StatusSucceeded)
				require.Equal(t, failed.OperationID, op.OperationID)
				require.Equal(t, 1, stripeSrv.RefundsByKey()[downstream], "one refund of this operation at the test Stripe")
				require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM refunds WHERE operation_id = $1`, op.OperationID), "one refund row of this operation")

				// The audit trail says what ended it and who re-drove it.
				detail, err := ops.GetOperation(ctx, d.Store, "acme", "refund_order", key)
				require.NoError(t, err)
				var reasons []string
				for _, e := range detail.Audit {
					reasons = append(reasons, string(e.Decision)+" "+e.UserID+" "+e.Reason)
				}
				trail, _ := json.Marshal(reasons)
				require.Contains(t, string(trail), "abandon: "+string(tc.code)+": ")
				decisions, by := auditTrail(t, d, key)
				require.Equal(t, []string{"accepted", "failed", "replayed", "redriven", "started", "succeeded"}, decisions)
				require.Equal(t, "alice", by)
			})
		})
	}
}
