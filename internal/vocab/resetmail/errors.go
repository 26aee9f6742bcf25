package resetmail

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"strings"

	gomail "github.com/wneessen/go-mail"
)

// SendError is a failed SMTP exchange. Its text names the server, the
// Message-ID and the server's reply, never the recipient's address.
type SendError struct {
	// Addr is the SMTP server (host:port).
	Addr string
	// MessageID is the Message-ID of the mail that was not sent.
	MessageID string
	// Stage is what failed: "connecting" (dial, greeting, STARTTLS, AUTH)
	// or "sending" (MAIL FROM to the end of DATA).
	Stage string
	// Code is the SMTP reply code when the server refused (4xx, 5xx), or 0
	// when there was no reply (network error, timeout).
	Code int

	permanent bool
	unknown   bool
	text      string
	err       error
}

func (e *SendError) Error() string {
	return fmt.Sprintf("resetmail: %s %s for %s: %s", e.Stage, e.Addr, e.MessageID, e.text)
}

// Unwrap returns the underlying error (from go-mail, net or context).
func (e *SendError) Unwrap() error { return e.err }

// Permanent reports whether err is definitive: retrying the same mail will
// fail the same way, and nothing was sent. That is a 5xx reply from the SMTP
// server (unknown or refused recipient, refused sender, failed
// authentication, message rejected) or a Mail that cannot be sent
// (ErrInvalidMail). Network errors, timeouts, cancellations and 4xx replies
// are transient: retry them.
func Permanent(err error) bool {
	if errors.Is(err, ErrInvalidMail) {
		return true
	}
	var se *SendError
	return errors.As(err, &se) && se.permanent
}

// OutcomeUnknown reports whether err left it unknown whether the server took
// the message: the whole message was written, but the connection failed or
// timed out before the server's answer to it arrived. A retry may then send
// the mail a second time (with the same Message-ID); the tool's policy
// decides whether to retry or to hand the claim to an operator
// (docs/design.md, "Reaper, pruner, re-drive").
// OutcomeUnknown errors are not Permanent.
func OutcomeUnknown(err error) bool {
	var se *SendError
	return errors.As(err, &se) && se.unknown
}

// sendError classifies err from go-mail and wraps it in a *SendError whose
// text has the recipients' addresses replaced.
func (s *Sender) sendError(ctx context.Context, messageID, stage string, rcpts []string, err error) error {
	se := &SendError{Addr: s.addr, MessageID: messageID, Stage: stage, err: err}

	var gse *gomail.SendError
	var tpe *textproto.Error
	switch {
	case errors.As(err, &gse):
		se.Code = gse.ErrorCode()
		switch gse.Reason {
		case gomail.ErrGetSender, gomail.ErrGetRcpts, gomail.ErrNoUnencoded:
			// The message itself cannot be sent as built.
			se.permanent = true
		case gomail.ErrSMTPDataClose:
			// The message was written; no reply means we cannot know
			// whether the server queued it.
			se.unknown = se.Code == 0
		}
	case errors.As(err, &tpe):
		se.Code = tpe.Code
	}
	if se.Code >= 500 && se.Code <= 599 {
		se.permanent = true
	}

	text := err.Error()
	for _, rcpt := range rcpts {
		if rcpt != "" {
			text = strings.ReplaceAll(text, rcpt, "recipient")
		}
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		// The connection was closed because ctx ended: say so, and let
		// errors.Is find the context error too.
		text = fmt.Sprintf("%s (%v)", text, cerr)
		se.err = errors.Join(err, cerr)
	}
	se.text = text
	return se
}
