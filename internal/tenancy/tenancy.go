// Package tenancy turns bearer tokens into actors: it mints token secrets,
// hashes them for storage, and authenticates requests against store.Tokens
// through a short-lived cache.
//
// Secrets are shown once (idemctl token create, or a seed run) and stored
// only as their SHA-256. Revocation takes effect within the Authenticator's
// cache TTL (DefaultTokenCacheTTL, 5 seconds, unless configured otherwise).
package tenancy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
)

// The scopes every deployment knows besides its tools' own.
const (
	ScopeOperationsRead = tokenspec.ScopeOperationsRead // get_operation and read tools
	ScopeOpsAdmin       = tokenspec.ScopeOpsAdmin       // River UI, re-drive over HTTP
)

// ValidateScopes checks that scopes is non-empty, known (the tool
// registry's Scopes) and free of repeats. Messages name the offending
// scope; callers prefix the field.
func ValidateScopes(scopes, known []string) error { return tokenspec.ValidateScopes(scopes, known) }

// TokenPrefix starts every token secret.
const TokenPrefix = tokenspec.Prefix

// NewToken mints a token: secret is "idg_" followed by 43 characters of
// unpadded base64url (32 bytes from crypto/rand); id is "tok_" followed by
// 16 hex digits. Store only HashToken(secret) and the id; show the secret
// once.
func NewToken() (secret, id string, err error) {
	var b [32 + 8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("new token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:32]), "tok_" + hex.EncodeToString(b[32:]), nil
}

// HashToken returns the SHA-256 of secret: what api_tokens stores and what
// the Authenticator looks tokens up (and caches them) by.
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// BearerFromHeader extracts the token from an Authorization header value
// "Bearer <token>". The scheme is case-insensitive (RFC 9110); spaces
// between scheme and token are skipped. It reports false for any other
// scheme, an empty token or a token containing whitespace. It does not check
// the token's shape: Authenticate does.
func BearerFromHeader(h string) (string, bool) {
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token := strings.TrimLeft(rest, " ")
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", false
	}
	return token, true
}
