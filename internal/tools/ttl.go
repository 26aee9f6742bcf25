package tools

import "time"

// The built-in tools' TTLs: how long after it ends an operation replays.
const (
	// MoneyTTL is the TTL of the money and seat tools (refunds, credits,
	// seats).
	MoneyTTL = 24 * time.Hour
	// MailTTL is the TTL of send_password_reset.
	MailTTL = 2 * time.Hour
)
