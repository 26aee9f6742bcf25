package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestApprovalFloodCappedAndGathered replays the red-team finding (a burst
// of calls above the approval threshold: as many waiting operations and as
// many mails): with IDEMGATE_APPROVALS_MAX_PENDING at 10, a first waiting
// call mails the approvers at once; 150 calls at once (the finding's
// burst) then leave 9 more waiting and are otherwise refused with
// approvals_pending_limit; the 9 are gathered into one more mail, which
// links each of them. A call the api sheds under the burst (503, the
// database pool busy past its bound) is sent again with its key, as a
// client does. On both engines.
func TestApprovalFloodCappedAndGathered(t *testing.T) {
	t.Parallel()
	for _, engineName := range []string{"postgres", "sqlite"} {
		t.Run(engineName, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			const maxPending, flood = 10, 150
			b := setupNoticesWith(t, engineName, func(cfg *config.Config) { cfg.ApprovalsMaxPending = maxPending },
				&app.WorkerOptions{MaxWorkers: 4, NoticePeriod: 10 * time.Second})
			acme := connect(t, b.url, tokenAcme)
			approver := b.approvers[0]
			mails := func() int {
				ms, err := b.mail.Search(ctx, "to:"+approver)
				require.NoError(t, err)
				return len(ms)
			}

			first, isErr := callTool(t, acme, "refund_order", refund("flood-key-first", 1500))
			require.False(t, isErr, "%+v", first.Error)
			require.Equal(t, vocab.StatusAwaitingApproval, first.Operation.Status)
			b.awaitNotice(t, first.Operation.OperationID)
			require.Equal(t, 1, mails(), "the first waiting call is mailed at once")

			answers := make([]*result, flood)
			errs := make([]bool, flood)
			var wg sync.WaitGroup
			for i := range flood {
				wg.Go(func() {
					text := callPatiently(t, acme, "refund_order", refund(fmt.Sprintf("flood-key-%03d", i), 1500))
					var out result
					require.NoError(t, json.Unmarshal([]byte(text), &out), text)
					answers[i], errs[i] = &out, out.Error != nil
				})
			}
			wg.Wait()
			var waiting []string
			refused := 0
			for i, res := range answers {
				switch {
				case !errs[i] && res.Operation.Status == vocab.StatusAwaitingApproval:
					waiting = append(waiting, res.Operation.OperationID)
				case errs[i] && res.Error.Code == vocab.CodeApprovalsPendingLimit:
					require.Contains(t, res.Error.Message, fmt.Sprintf("%d calls of this tenant already await", maxPending))
					require.Equal(t, time.Minute.Milliseconds(), res.RetryAfterMS)
					refused++
				case res == nil:
					t.Fatalf("call %d failed", i)
				default:
					t.Fatalf("unexpected answer: %+v", res)
				}
			}
			require.Len(t, waiting, maxPending-1, "never more than the cap waiting")
			require.Equal(t, flood-(maxPending-1), refused)

			// Every notice job ends; the 9 are gathered into one mail.
			require.Eventually(t, func() bool { return b.noticeJobs("", "completed") == maxPending }, 60*time.Second, 100*time.Millisecond,
				"every notice job completes")
			require.Equal(t, 2, mails(), "one more mail for all the calls that waited within the period")
			ms, err := b.mail.Search(ctx, "to:"+approver+` subject:"Approval needed: 9 calls for acme"`)
			require.NoError(t, err)
			require.Len(t, ms, 1)
			body, err := b.mail.Body(ctx, ms[0].ID)
			require.NoError(t, err)
			for _, op := range waiting {
				require.Contains(t, body, b.publicURL+"/approvals/"+op)
			}
			require.NotContains(t, body, first.Operation.OperationID, "the first call was mailed before")
			require.Equal(t, 1, strings.Count(body, "9 calls for tenant acme wait for a person's approval"))
			metrics := b.metrics()
			require.Contains(t, metrics, `idemgate_approval_notices_total{outcome="sent"} 2`)
		})
	}
}
