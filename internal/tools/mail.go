package tools

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
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
func SendPasswordReset(d *Deps) *gate.Mutation[MailArgs, Mail] {
	return &gate.Mutation[MailArgs, Mail]{
		Name:        "send_password_reset",
		Title:       "Send a password-reset mail",
		Description: "Mail a password-reset link to a user, once per idempotency_key (a resent mail carries the same link).",
		Scope:       "users:password_reset",
		Provider:    "smtp",
		Policy: gate.Policy{
			TTL:                MailTTL,
			DuplicateWindow:    d.duplicateWindow(),
			AuditFields:        []string{"user_id"},
			FailUnknownOutcome: d.MailFailUnknownOutcome,
		},
		Call: func(ctx context.Context, op *gate.Op[MailArgs]) (*Mail, error) {
			var email, base string
			err := d.DB(ctx, func(tx gate.Tx) error {
				if err := tx.QueryRow(ctx, `SELECT email FROM users WHERE tenant_id = $1 AND user_id = $2`,
					op.TenantID, op.Args.UserID).Scan(&email); err != nil {
					return err // not found: nothing happened; else transient
				}
				// The tenant's own link base (tenant_settings, idemgate's
				// table), or "": the deployment's.
				err := tx.QueryRow(ctx, `SELECT coalesce(reset_link_base, '') FROM tenant_settings WHERE tenant_id = $1`,
					op.TenantID).Scan(&base)
				if errors.Is(err, gate.ErrNotFound) {
					return nil
				}
				return err
			})
			if err != nil {
				return nil, notFound(err, "user_id", op.Args.UserID)
			}
			token := resetmail.Token(d.Secret, tokenKey(op))
			sent, err := d.Mail.Send(ctx, &resetmail.Mail{To: email, UserID: op.Args.UserID, DownstreamKey: op.DownstreamKey,
				Token: token, LinkBase: base})
			if err != nil {
				return nil, mailError(err, d.MailFailUnknownOutcome)
			}
			return &Mail{UserID: op.Args.UserID, MessageID: sent.MessageID, SentAt: sent.SentAt.UTC()}, nil
		},
		Record: func(ctx context.Context, tx gate.Tx, op *gate.Op[MailArgs], m *Mail) error {
			// The same token twice (a resent mail) is a no-op.
			_, err := tx.Exec(ctx, `INSERT INTO password_reset_tokens (tenant_id, user_id, operation_id, token_hash, message_id, expires_at)
				VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (token_hash) DO NOTHING`,
				op.TenantID, m.UserID, op.OperationID, resetmail.TokenHash(resetmail.Token(d.Secret, tokenKey(op))),
				m.MessageID, timeArg(tx, m.SentAt.Add(ResetTokenTTL)))
			return err
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
func tokenKey(op *gate.Op[MailArgs]) string {
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
		return gate.Unknown(err)
	case resetmail.OutcomeUnknown(err):
		return gate.Transient("mail_outcome_unknown", err)
	}
	return gate.Transient("mail_error", err)
}

// ResetTokens redeems the password-reset links send_password_reset mails
// (store.ResetTokens, for POST /v1/password-resets/redeem, resetroute).
type ResetTokens struct {
	// DB is the deployment's database.
	DB DB
}

// ResetTokenRedeem implements store.ResetTokens: one conditional update
// consumes an unused, unexpired token; when it matches none, the token's
// state says why (both states only ever become true, so the answer holds
// for the failed update).
func (r *ResetTokens) ResetTokenRedeem(ctx context.Context, tokenHash []byte) (*store.ResetTokenRedemption, error) {
	var red store.ResetTokenRedemption
	var used, expired bool
	consumed := false
	err := r.DB(ctx, func(tx gate.Tx) error {
		redeem, state := `
UPDATE password_reset_tokens SET used_at = now()
WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()
RETURNING tenant_id, user_id, operation_id::text, used_at`, `
SELECT used_at IS NOT NULL, expires_at <= now() FROM password_reset_tokens WHERE token_hash = $1`
		if tx.Engine() == gate.SQLite {
			redeem, state = `
UPDATE password_reset_tokens SET used_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE token_hash = $1 AND used_at IS NULL AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
RETURNING tenant_id, user_id, operation_id, used_at`, `
SELECT used_at IS NOT NULL, expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM password_reset_tokens WHERE token_hash = $1`
		}
		err := tx.QueryRow(ctx, redeem, tokenHash).Scan(&red.TenantID, &red.UserID, &red.OperationID, dbTime{&red.UsedAt})
		if !errors.Is(err, vocab.ErrNotFound) {
			consumed = err == nil
			return err
		}
		return tx.QueryRow(ctx, state, tokenHash).Scan(&used, &expired)
	})
	switch {
	case err != nil:
		return nil, err
	case consumed:
		return &red, nil
	case used:
		return nil, vocab.ErrAlreadyUsed
	case expired:
		return nil, vocab.ErrExpired
	}
	// Unused and unexpired now, yet not consumed: only a database clock
	// that went back between the two statements does that.
	return nil, errors.New("password-reset token neither used nor expired, yet not consumed: did the database clock go back?")
}
