package builtins_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/builtins"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestApprovalMailerRefusals: a server that refuses the recipients for
// good (5xx) makes the notice rejected, not retried; a passing refusal
// (4xx) leaves it transient.
func TestApprovalMailerRefusals(t *testing.T) {
	t.Parallel()
	until := time.Now().Add(time.Hour)
	c := &core.Claim{OperationID: "00000000-0000-4000-8000-000000000001", TenantID: "acme", Tool: "refund_order",
		UserID: "support-bot", Args: json.RawMessage(`{"amount_cents":1500,"order_id":"ord_9f2"}`), ArgsHash: "abc",
		Status: vocab.StatusAwaitingApproval, CreatedAt: time.Now(), ApprovalExpiresAt: &until}
	for _, tc := range []struct {
		trigger  string
		rejected bool
	}{
		{"Recipient:550:100", true},
		{"Sender:451:100", false},
	} {
		t.Run(tc.trigger, func(t *testing.T) {
			t.Parallel()
			smtpAddr, _ := mailpit.StartPrivate(t, "--chaos-triggers", tc.trigger)
			cfg := config.Defaults()
			cfg.SMTPAddr = smtpAddr
			m, err := builtins.ApprovalMailer(cfg, nil)
			require.NoError(t, err)
			err = m.MailApprovalNotice(t.Context(), []*core.Claim{c}, []string{"finance@acme.example"}, []string{"https://idemgate.example.com/approvals/" + c.OperationID})
			require.Error(t, err)
			require.Equal(t, tc.rejected, errors.Is(err, jobs.ErrNoticeRejected), "%v", err)
			require.NotContains(t, err.Error(), "finance@acme.example")
		})
	}
}
