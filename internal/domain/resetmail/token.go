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

// TokenLen is a token's length: 32 bytes in base64url without padding.
const TokenLen = 43

// WellFormed reports whether s has a token's shape: TokenLen characters of
// base64url. It says nothing of whether such a token was ever issued.
func WellFormed(s string) bool {
	if len(s) != TokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// TokenHash returns sha256(token), the only form of the token the database
// stores: a reset request presents the token, and its hash is looked up.
func TokenHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// MessageID returns the Message-ID header value for downstreamKey:
// "<" + downstreamKey + "@" + domain + ">". It is the same for every send
// of the key.
func MessageID(downstreamKey, domain string) string {
	return "<" + downstreamKey + "@" + domain + ">"
}
