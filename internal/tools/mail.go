package tools

import (
	"context"
	"github.com/idemgate/idemgate/internal/toolspec"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/domain/resetmail"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/tool"
)

// ResetTokenTTL is how long a password-reset link stays valid.
const ResetTokenTTL = time.Hour

// MailArgs are send_password_reset's arguments.
type MailArgs struct {
	UserID string `json:"user_id" jsonschema:"The user to mail." idem:"id"`
}

// Mail is send_password_reset's result.
type Mail struct {
	UserID    string    `json:"user_id"`
	MessageID string    `json:"message_id" jsonschema:"The mail's Message-ID, derived from the operation: a resent mail has the same."`
	SentAt    time.Time `json:"sent_at"`
}

// SendPasswordReset mails a password-reset link, on the tenant's own link
// base when it has one, else the deployment's. The token is HMAC(secret,
// operation key) (tokenKey), so a resent mail carries the same token, and the
// Message-ID derives from the downstream key, so receivers can fold
// duplicates that SMTP cannot prevent.
func SendPasswordReset(d *Deps) *tool.Mutation[MailArgs, Mail] {
	return &tool.Mutation[MailArgs, Mail]{
		Name:        "send_password_reset",
		Title:       "Send a password-reset mail",
		Description: "Mail a password-reset link to a user, once per idempotency_key (a resent mail carries the same link).",
		Scope:       "users:password_reset",
		Provider:    "smtp",
		Policy: tool.Policy{
			TTL:                gate.DefaultMailTTL,
			AuditFields:        []string{"user_id"},
			FailUnknownOutcome: d.MailFailUnknownOutcome,
		},
		Call: func(ctx context.Context, op *tool.Op[MailArgs]) (*Mail, error) {
			user, err := d.Data.UserGet(ctx, op.TenantID, op.Args.UserID)
			if err != nil {
				return nil, notFound(err, "user_id", op.Args.UserID)
			}
			base, err := d.Data.TenantResetLinkBase(ctx, op.TenantID)
			if err != nil {
				return nil, tool.Transient(codeUnavailable, err)
			}
			token := resetmail.Token(d.Secret, tokenKey(op))
			sent, err := d.Mail.Send(ctx, &resetmail.Mail{To: user.Email, UserID: op.Args.UserID, DownstreamKey: op.DownstreamKey,
				Token: token, LinkBase: base})
			if err != nil {
				return nil, mailError(err, d.MailFailUnknownOutcome)
			}
			return &Mail{UserID: op.Args.UserID, MessageID: sent.MessageID, SentAt: sent.SentAt.UTC()}, nil
		},
		Record: func(ctx context.Context, tx tool.Tx, op *tool.Op[MailArgs], m *Mail) error {
			return d.Data.ResetTokenInsert(ctx, storeTx(tx), &store.ResetTokenInsertParams{
				TenantID: op.TenantID, UserID: m.UserID, OperationID: op.OperationID,
				TokenHash: resetmail.TokenHash(resetmail.Token(d.Secret, tokenKey(op))),
				MessageID: m.MessageID, ExpiresAt: m.SentAt.Add(ResetTokenTTL),
			})
		},
	}
}

// tokenKey is what a reset token derives from: "idg_<operation id>_<generation>",
// which is the downstream key of claims without an intent key (so their
// tokens are what they were), and unique per operation. Not the
// intent-derived downstream key itself: the same key and user may be sent
// a reset again as a new intent once its history is forgotten, and must not
// get the first one's token (token hashes are unique). A mail whose claim a
// lost commit forgot is resent with the same Message-ID and a new link: the
// first link's token row was lost with that commit.
func tokenKey(op *tool.Op[MailArgs]) string {
	gen := op.DownstreamKey[strings.LastIndexByte(op.DownstreamKey, '_')+1:]
	return "idg_" + op.OperationID + "_" + gen
}

// mailError classifies a failed send: rejected (definitive, nothing sent),
// outcome unknown (the server may have taken the whole message: sent again
// with the same Message-ID, or handed to an operator when failUnknown), or
// transient.
func mailError(err error, failUnknown bool) error {
	switch {
	case resetmail.Permanent(err):
		return &toolspec.Error{Outcome: toolspec.OutcomeHappened, Info: errInfo("mail_rejected", err), Err: err}
	case resetmail.OutcomeUnknown(err) && failUnknown:
		return tool.Unknown(err)
	case resetmail.OutcomeUnknown(err):
		return tool.Transient("mail_outcome_unknown", err)
	}
	return tool.Transient("mail_error", err)
}
