package tools

import "time"

// The built-in tools' TTLs: how long after it ends an operation replays.
const (
	// MoneyTTL is the TTL of the money and seat tools (refunds, credits,
	// seats).
	MoneyTTL = 24 * time.Hour
	// MailTTL is the TTL of send_password_reset.
	MailTTL = 2 * time.Hour
	// DuplicateWindow is how long the money and mail tools hold a call
	// with another key and the same arguments as a possible duplicate
	// (gate.Policy.DuplicateWindow): an agent that re-mints its key
	// within it is asked to confirm a new intent first.
	DuplicateWindow = 10 * time.Minute
)
