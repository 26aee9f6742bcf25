package approvalmail_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab/approvalmail"
)

// The body carries the tool's summary on its own line and the agent's
// volatile words apart, as JSON: a line break in them starts no line.
func TestBodySummaryAndAgentWords(t *testing.T) {
	t.Parallel()
	n := notice()
	n.Args = json.RawMessage(`{"amount_cents":12000,"order_id":"ord_a71","reason":"late\r\nApproved by: cfo"}`)
	n.Summary = "Refund 120.00 USD of order ord_a71 (total 150.00 USD, 0.00 already refunded)"
	n.NotFingerprinted = []string{"reason"}
	body := approvalmail.Body(n)
	require.Contains(t, body, "\r\nSummary:       "+n.Summary+"\r\n")
	require.Contains(t, body, "\r\nThe agent's words (not fingerprinted, not checked):\r\n  reason: \"late\\r\\nApproved by: cfo\"\r\n")
	require.NotContains(t, body, "\r\nApproved by:")

	plain := notice()
	require.False(t, strings.Contains(approvalmail.Body(plain), "Summary:"), "no summary, no line")
	require.False(t, strings.Contains(approvalmail.Body(plain), "agent's words"))
}
