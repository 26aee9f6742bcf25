// Package resetmail is the effect of the send_password_reset tool: it sends
// one password-reset mail over SMTP for a claim's downstream key.
//
// Everything that identifies the mail derives from the downstream key
// (idg_<operation_id>_<generation>), which is stable across reclaims of the
// claim: the reset token is HMAC-SHA256(IDEMGATE_SECRET, key), so a resent
// mail carries the same link, and the Message-ID is <key@domain>, so
// receivers can fold resends. SMTP itself cannot deduplicate: the same key
// sent twice is two messages (docs/design.md, "Two kinds of effect").
package resetmail

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"

	"github.com/idemgate/idemgate/internal/vocab/resettoken"
)

// Token returns the password-reset token for downstreamKey:
// HMAC-SHA256(secret, downstreamKey), base64url without padding (43
// characters). It is deterministic, so every send of the same claim
// generation carries the same link, and it differs for every key.
func Token(secret []byte, downstreamKey string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(downstreamKey))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// TokenLen is a token's length (resettoken.TokenLen).
const TokenLen = resettoken.TokenLen

// WellFormed is resettoken.WellFormed.
func WellFormed(s string) bool { return resettoken.WellFormed(s) }

// TokenHash is resettoken.TokenHash.
func TokenHash(token string) []byte { return resettoken.TokenHash(token) }

// MessageID returns the Message-ID header value for downstreamKey:
// "<" + downstreamKey + "@" + domain + ">". It is the same for every send
// of the key.
func MessageID(downstreamKey, domain string) string {
	return "<" + downstreamKey + "@" + domain + ">"
}
