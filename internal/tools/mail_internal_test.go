package tools

import (
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/smtptest"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

// TestMailErrorFollowsThePolicy: a mail whose outcome is unknown (the server
// took the whole message and never answered) is sent again with the same
// Message-ID by default, or handed to an operator as outcome_unknown when
// the deployment says so; refusals are definitive, other errors transient.
func TestMailErrorFollowsThePolicy(t *testing.T) {
	t.Parallel()
	send := func(addr string) error {
		s, err := resetmail.NewSender(&resetmail.SenderConfig{Addr: addr, From: "idemgate <no-reply@localhost>",
			LinkBase: "http://127.0.0.1:8080/reset", Timeout: 500 * time.Millisecond})
		require.NoError(t, err)
		_, err = s.Send(t.Context(), &resetmail.Mail{To: "ana@example.com", UserID: "usr_1", DownstreamKey: "idg_x_0", Token: "t"})
		require.Error(t, err)
		return err
	}
	unknown := send(smtptest.Start(t, smtptest.Swallow))
	require.True(t, resetmail.OutcomeUnknown(unknown), "%v", unknown)

	var te *toolspec.Error
	require.True(t, errors.As(mailError(unknown, false), &te))
	require.Equal(t, toolspec.OutcomeTransient, te.Outcome)
	require.Equal(t, vocab.Code("mail_outcome_unknown"), te.Info.Code)

	require.True(t, errors.As(mailError(unknown, true), &te))
	require.Equal(t, toolspec.OutcomeUnknown, te.Outcome)
	require.Equal(t, vocab.CodeOutcomeUnknown, te.Info.Code)

	silent := send(smtptest.Start(t, smtptest.Silent))
	require.True(t, errors.As(mailError(silent, true), &te))
	require.Equal(t, toolspec.OutcomeTransient, te.Outcome, "no message was written: retried whatever the policy")
	require.Equal(t, vocab.Code("mail_error"), te.Info.Code)

	require.True(t, errors.As(mailError(resetmail.ErrInvalidMail, false), &te))
	require.Equal(t, vocab.Code("mail_rejected"), te.Info.Code)
	require.True(t, te.Definitive())

	d := &Deps{MailFailUnknownOutcome: true}
	spec, err := Spec(SendPasswordReset(d))
	require.NoError(t, err)
	require.True(t, spec.Policy.FailUnknownOutcome, "the reaper fails its expired leases at once too")
}
