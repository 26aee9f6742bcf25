package approvalmail_test

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/vocab/approvalmail"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

func newSender(t *testing.T, addr string) *resetmail.Sender {
	t.Helper()
	s, err := resetmail.NewSender(&resetmail.SenderConfig{Addr: addr, From: "Idemgate <no-reply@idemgate.test>",
		LinkBase: "http://127.0.0.1:8080/reset-password", Timeout: 5 * time.Second})
	require.NoError(t, err)
	return s
}

func notice() *approvalmail.Notice {
	op := rand.Text() // unique per test: the Mailpit may be shared
	return &approvalmail.Notice{
		To:       []string{"finance@acme.example", "cfo@acme.example"},
		TenantID: "acme", Tool: "refund_order", OperationID: op,
		Args:        json.RawMessage(`{"amount_cents":12000,"order_id":"ord_a71"}`),
		ArgsHash:    "9f2c0e",
		RequesterID: "support-bot",
		RequestedAt: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC),
		ExpiresAt:   time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC),
		Link:        "https://idemgate.example.com/approvals/" + op,
	}
}

func TestSendArrivesOnceToAllApprovers(t *testing.T) {
	t.Parallel()
	smtpAddr, apiURL := mailpit.Start(t)
	mp := mailpit.New(apiURL)
	m := &approvalmail.Mailer{Sender: newSender(t, smtpAddr)}
	ctx := t.Context()
	n := notice()

	sent, err := m.Send(ctx, n)
	require.NoError(t, err)
	require.Equal(t, resetmail.MessageID(approvalmail.Key(n.OperationID), "idemgate.test"), sent.MessageID)
	ms, err := mp.ByMessageID(ctx, sent.MessageID)
	require.NoError(t, err)
	require.Len(t, ms, 1, "one message for all the approvers")
	require.Equal(t, "Approval needed: refund_order for acme", ms[0].Subject)
	var to []string
	for _, a := range ms[0].To {
		to = append(to, a.Address)
	}
	require.Equal(t, n.To, to)
	body, err := mp.Body(ctx, ms[0].ID)
	require.NoError(t, err)
	for _, want := range []string{
		`{"amount_cents":12000,"order_id":"ord_a71"}`, "Fingerprint:   9f2c0e", "Requested by:  support-bot",
		"Requested at:  2026-12-04T10:00:00Z", "Decide before: 2026-12-05T10:00:00Z", n.Link,
	} {
		require.Contains(t, body, want)
	}

	// Sent again (a retried job): another message, the same Message-ID.
	again, err := m.Send(ctx, n)
	require.NoError(t, err)
	require.Equal(t, sent.MessageID, again.MessageID)
	count, err := mp.CountByMessageID(ctx, sent.MessageID)
	require.NoError(t, err)
	require.Equal(t, 2, count)
}

func TestInvalidNoticeIsPermanent(t *testing.T) {
	t.Parallel()
	m := &approvalmail.Mailer{Sender: newSender(t, "127.0.0.1:1")} // never dialled
	for name, edit := range map[string]func(*approvalmail.Notice){
		"NoRecipient":  func(n *approvalmail.Notice) { n.To = nil },
		"BadRecipient": func(n *approvalmail.Notice) { n.To = []string{"finance"} },
		"NoOperation":  func(n *approvalmail.Notice) { n.OperationID = "" },
		"NoLink":       func(n *approvalmail.Notice) { n.Link = "" },
	} {
		n := notice()
		edit(n)
		_, err := m.Send(t.Context(), n)
		require.True(t, errors.Is(err, resetmail.ErrInvalidMail) && resetmail.Permanent(err), "%s: %v", name, err)
		require.False(t, strings.Contains(err.Error(), "finance@"), "%s: names an address: %v", name, err)
	}
}

// A line or paragraph separator in the arguments is shown as its escape,
// not as a line break a reader would take for the arguments' own.
func TestBodyShowsSeparatorsEscaped(t *testing.T) {
	t.Parallel()
	body := approvalmail.Body(&approvalmail.Notice{Tool: "refund_order", TenantID: "acme", OperationID: "op",
		Args: json.RawMessage("{\"memo\":\"a\u2028b\u2029c\",\"order_id\":\"ord_1\"}"), ArgsHash: "h"})
	require.NotContains(t, body, "\u2028")
	require.NotContains(t, body, "\u2029")
	require.Contains(t, body, `{"memo":"a\u2028b\u2029c","order_id":"ord_1"}`)
}
