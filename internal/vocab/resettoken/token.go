// Package resettoken is the shape and stored form of a password-reset
// token (package resetmail makes and mails them), for the api that redeems
// them without linking the mailer.
package resettoken

import "crypto/sha256"

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
