package jobs

import (
	"context"
	"encoding/json"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/domain/resetmail"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/store"
)

// ResetTokenTTL is how long a password-reset link stays valid.
const ResetTokenTTL = time.Hour

// MailEffect sends the password-reset mail. The token is
// HMAC(secret, downstream key), so a resent mail carries the same link, and
// the Message-ID derives from the downstream key, so receivers can fold
// duplicates that SMTP cannot prevent.
type MailEffect struct {
	Data   store.Domain
	Sender *resetmail.Sender
	Secret []byte
}

type mailResult struct {
	UserID    string    `json:"user_id"`
	MessageID string    `json:"message_id"`
	SentAt    time.Time `json:"sent_at"`
}

// Call implements Effect.
func (e *MailEffect) Call(ctx context.Context, c *gate.Claim) (json.RawMessage, error) {
	var a struct {
		UserID string `json:"user_id"`
	}
	if err := decodeArgs(c, &a); err != nil {
		return nil, err
	}
	user, err := e.Data.UserGet(ctx, c.TenantID, a.UserID)
	if err != nil {
		return nil, notFound(err, "user_id", a.UserID)
	}
	token := resetmail.Token(e.Secret, c.DownstreamKey)
	sent, err := e.Sender.Send(ctx, &resetmail.Mail{To: user.Email, UserID: a.UserID, DownstreamKey: c.DownstreamKey, Token: token})
	if err != nil {
		info := domain.ErrorInfo{Code: "mail_error", Message: err.Error()}
		if resetmail.Permanent(err) {
			info.Code = "mail_rejected"
			return nil, &Failure{Info: info}
		}
		return nil, &Transient{Info: info, Err: err}
	}
	return json.Marshal(mailResult{UserID: a.UserID, MessageID: sent.MessageID, SentAt: sent.SentAt.UTC()})
}

// Record implements Effect: the token's hash, so the link can be checked.
func (e *MailEffect) Record(ctx context.Context, tx gate.Tx, c *gate.Claim, result json.RawMessage) error {
	var r mailResult
	if err := json.Unmarshal(result, &r); err != nil {
		return err
	}
	return e.Data.ResetTokenInsert(ctx, tx, &store.ResetTokenInsertParams{
		TenantID:    c.TenantID,
		UserID:      r.UserID,
		OperationID: c.OperationID,
		TokenHash:   resetmail.TokenHash(resetmail.Token(e.Secret, c.DownstreamKey)),
		MessageID:   r.MessageID,
		ExpiresAt:   r.SentAt.Add(ResetTokenTTL),
	})
}
