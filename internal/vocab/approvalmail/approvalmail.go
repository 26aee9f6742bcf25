// Package approvalmail is the notice that tells a tenant's approvers of a
// call waiting for their approval: one plain-text message to all of them,
// sent with resetmail's Sender (its SMTP settings, timeouts and error
// classes). Its Message-ID derives from the operation id, so a notice sent
// again (a retried job) has the same one and receivers can fold the two.
package approvalmail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

// Notice is what one notice says.
type Notice struct {
	// To are the approvers' addresses (tenant_settings.approval_mail_to).
	To       []string
	TenantID string
	Tool     string
	// OperationID names the waiting operation; the Message-ID derives
	// from it (Key).
	OperationID string
	// Args are the arguments exactly as the gate fingerprinted them
	// (the claim's canonical JSON).
	Args json.RawMessage
	// ArgsHash is their fingerprint, which an approval must name.
	ArgsHash string
	// RequesterID is the user who made the call.
	RequesterID string
	// RequestedAt is when the call was claimed.
	RequestedAt time.Time
	// ExpiresAt is the end of the approval window.
	ExpiresAt time.Time
	// Link is the page where an approver decides.
	Link string
	// Summary is the tool's account of the call as of the request
	// (gate.Mutation.Review); "" if none.
	Summary string
	// NotFingerprinted are the tool's volatile arguments (a refund's
	// reason): quoted apart from the summary as the agent's words.
	NotFingerprinted []string
}

// Key is the Message-ID's left part of the notice of operationID.
func Key(operationID string) string { return "idg_approval_" + operationID }

// Subject is the notice's subject line.
func Subject(n *Notice) string { return fmt.Sprintf("Approval needed: %s for %s", n.Tool, n.TenantID) }

// Body is the notice's plain text.
func Body(n *Notice) string {
	lines := []string{
		"Hello,",
		"",
		fmt.Sprintf("a call of %s for tenant %s waits for a person's approval.", n.Tool, n.TenantID),
		"",
		"Tool:          " + n.Tool,
		"Requested by:  " + n.RequesterID,
		"Requested at:  " + stamp(n.RequestedAt),
		"Decide before: " + stamp(n.ExpiresAt) + " (then it expires and nothing is done)",
		"Operation:     " + n.OperationID,
	}
	lines = append(lines, said(n)...)
	lines = append(lines,
		"",
		"Arguments (the fingerprint covers them all but a tool's free-text",
		"fields, such as a refund's reason, which a retry may change):",
		"",
		visible(string(n.Args)),
		"",
		"Fingerprint:   "+n.ArgsHash,
		"",
		"To approve or deny it, open:",
		"",
		n.Link,
		"",
		"The page must show the same fingerprint. The requester cannot approve",
		"their own call; nothing is done until someone else approves it.",
		"",
	)
	return strings.Join(lines, "\r\n")
}

// DigestSubject is the subject line of a notice listing ns.
func DigestSubject(ns []*Notice) string {
	if len(ns) == 1 {
		return Subject(ns[0])
	}
	return fmt.Sprintf("Approval needed: %d calls for %s", len(ns), ns[0].TenantID)
}

// Digest is the plain text of a notice listing ns, gathered within one
// period: each one's Body, in order, under a line saying how many wait.
func Digest(ns []*Notice) string {
	if len(ns) == 1 {
		return Body(ns[0])
	}
	parts := []string{fmt.Sprintf("%d calls for tenant %s wait for a person's approval; each is below, with its own link.\r\n", len(ns), ns[0].TenantID)}
	for i, n := range ns {
		parts = append(parts, fmt.Sprintf("---- %d of %d ----\r\n", i+1, len(ns)), Body(n))
	}
	return strings.Join(parts, "\r\n")
}

// said is the notice's summary line and the agent's own words (its volatile
// arguments, as JSON: a line break in them cannot start a line of the mail).
func said(n *Notice) []string {
	var lines []string
	if n.Summary != "" {
		lines = append(lines, "", "Summary:       "+visible(n.Summary))
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(n.Args, &args) != nil {
		return lines
	}
	heading := false
	for _, f := range n.NotFingerprinted {
		v, ok := args[f]
		if !ok {
			continue
		}
		if !heading {
			lines, heading = append(lines, "", "The agent's words (not fingerprinted, not checked):"), true
		}
		lines = append(lines, "  "+f+": "+visible(string(v)))
	}
	return lines
}

// visible writes the line and paragraph separators of the arguments as
// their JSON escapes: raw, a reader would see a line break that is not in
// the arguments (inside a JSON string the escape is the same value).
func visible(args string) string {
	return strings.NewReplacer("\u2028", `\u2028`, "\u2029", `\u2029`).Replace(args)
}

// stamp writes t in UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Mailer sends notices with a resetmail.Sender.
type Mailer struct {
	Sender *resetmail.Sender
}

// Send sends n once, as one message to all of n.To. Its errors are the
// Sender's: resetmail.Permanent ones (a refused recipient, an invalid
// address) fail the same way again; others may be retried, and a notice
// sent again has the same Message-ID.
func (m *Mailer) Send(ctx context.Context, n *Notice) (*resetmail.Sent, error) {
	if n == nil || n.OperationID == "" || n.Link == "" {
		return nil, fmt.Errorf("%w: approvalmail: a notice needs an operation and a link", resetmail.ErrInvalidMail)
	}
	if m.Sender == nil {
		return nil, errors.New("approvalmail: Mailer.Sender is nil")
	}
	return m.Sender.SendMessage(ctx, &resetmail.Message{To: n.To, Subject: Subject(n), Body: Body(n), Key: Key(n.OperationID)})
}

// SendAll sends one message listing ns (Digest) to ns[0].To; its
// Message-ID derives from ns[0]'s operation, so the same notice sent again
// has the same one. Its errors are Send's.
func (m *Mailer) SendAll(ctx context.Context, ns []*Notice) (*resetmail.Sent, error) {
	if len(ns) == 1 {
		return m.Send(ctx, ns[0])
	}
	for _, n := range ns {
		if n == nil || n.OperationID == "" || n.Link == "" {
			return nil, fmt.Errorf("%w: approvalmail: a notice needs operations and their links", resetmail.ErrInvalidMail)
		}
	}
	if len(ns) == 0 {
		return nil, fmt.Errorf("%w: approvalmail: a notice needs an operation", resetmail.ErrInvalidMail)
	}
	if m.Sender == nil {
		return nil, errors.New("approvalmail: Mailer.Sender is nil")
	}
	return m.Sender.SendMessage(ctx, &resetmail.Message{To: ns[0].To, Subject: DigestSubject(ns), Body: Digest(ns), Key: Key(ns[0].OperationID)})
}
