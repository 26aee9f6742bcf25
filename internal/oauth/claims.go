package oauth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/vocab"
)

// MaxTokenBytes bounds the length of a bearer token. Longer ones are refused
// before anything is decoded.
const MaxTokenBytes = 16 << 10

// signingAlgs are the JWS algorithms accepted: asymmetric only, so that
// neither "none" nor an HMAC keyed with a public key can pass.
var signingAlgs = []string{
	"RS256", "RS384", "RS512",
	"PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512",
	"EdDSA",
}

// header is the part of a JWS header looked at before verification.
type header struct {
	Alg string `json:"alg"`
	Typ string `json:"typ"`
}

// registered is the part of the claims checked before the signature, so that
// a token from another issuer, for another audience or expired is refused
// with its reason and without a fetch of the issuer's keys. These checks
// only refuse: acceptance needs go-oidc's verification of the same claims.
type registered struct {
	Issuer    string      `json:"iss"`
	Audience  audience    `json:"aud"`
	Expiry    numericDate `json:"exp"`
	NotBefore numericDate `json:"nbf"`
}

// audience is aud, a string or an array of strings (RFC 7519 §4.1.3).
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*a = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*a = audience{s}
		return nil
	}
	var ss []string
	if err := json.Unmarshal(b, &ss); err != nil {
		return fmt.Errorf("aud is neither a string nor an array of strings")
	}
	*a = ss
	return nil
}

// numericDate is a NumericDate (RFC 7519 §2): seconds since the epoch,
// possibly fractional. The zero value means absent.
type numericDate struct {
	t   time.Time
	set bool
}

func (d *numericDate) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*d = numericDate{}
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil || math.IsNaN(f) || math.Abs(f) > 1e15 {
		return fmt.Errorf("not a NumericDate")
	}
	sec, frac := math.Modf(f)
	*d = numericDate{t: time.Unix(int64(sec), int64(frac*1e9)), set: true}
	return nil
}

// split returns the decoded header and payload of a compact JWS, refusing
// what cannot be one.
func split(token string) (header, []byte, *TokenError) {
	switch {
	case token == "":
		return header{}, nil, refuse(ReasonEmptyToken, "the access token is empty")
	case len(token) > MaxTokenBytes:
		return header{}, nil, refuse(ReasonTooLarge, fmt.Sprintf("the access token is longer than %d bytes", MaxTokenBytes))
	}
	parts := strings.Split(token, ".")
	switch len(parts) {
	case 3:
	case 5:
		return header{}, nil, refuse(ReasonEncrypted, "the access token is encrypted (JWE); a signed JWT is required")
	default:
		return header{}, nil, refuse(ReasonMalformed, "the access token is not a JWT")
	}
	rawHeader, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return header{}, nil, refuse(ReasonMalformed, "the access token's header is not base64url")
	}
	var h header
	if err := json.Unmarshal(rawHeader, &h); err != nil {
		return header{}, nil, refuse(ReasonMalformed, "the access token's header is not a JSON object")
	}
	if !slices.Contains(signingAlgs, h.Alg) {
		return header{}, nil, refuse(ReasonAlgorithm, "the access token's signing algorithm is not accepted (accepted: "+strings.Join(signingAlgs, ", ")+")")
	}
	if !acceptedType(h.Typ) {
		return header{}, nil, refuse(ReasonType, "the access token's typ header is neither at+jwt nor JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return header{}, nil, refuse(ReasonMalformed, "the access token's payload is not base64url")
	}
	return h, payload, nil
}

// acceptedType reports whether typ marks a token we take as an access token.
// RFC 9068 asks for "at+jwt"; many authorization servers still write "JWT"
// or nothing, and refusing those would refuse their every token. Other
// types (an ID token's "id_token+jwt", a "logout+jwt", "dpop+jwt") are
// refused. Media types are compared without case and their "application/"
// prefix (RFC 7515 §4.1.9).
func acceptedType(typ string) bool {
	t := strings.ToLower(typ)
	t = strings.TrimPrefix(t, "application/")
	return t == "" || t == "jwt" || t == "at+jwt"
}

// checkRegistered refuses a payload whose iss, aud, exp or nbf is wrong.
// nbf has the same leeway as go-oidc (5 minutes), exp none.
func checkRegistered(payload []byte, issuer, aud string, now time.Time) *TokenError {
	var c registered
	if err := json.Unmarshal(payload, &c); err != nil {
		return refuse(ReasonMalformed, "the access token's claims do not parse")
	}
	switch {
	case c.Issuer != issuer:
		return refuse(ReasonIssuer, fmt.Sprintf("the access token was not issued by %s", issuer))
	case !slices.Contains(c.Audience, aud):
		return refuse(ReasonAudience, fmt.Sprintf("the access token is not for audience %s", aud))
	case !c.Expiry.set:
		return refuse(ReasonExpired, "the access token has no exp claim")
	case !now.Before(c.Expiry.t):
		return refuse(ReasonExpired, "the access token expired")
	case c.NotBefore.set && now.Add(nbfLeeway).Before(c.NotBefore.t):
		return refuse(ReasonNotYet, "the access token is not valid yet (nbf)")
	}
	return nil
}

const nbfLeeway = 5 * time.Minute

// claimNames names the claims an actor is read from.
type claimNames struct {
	tenant, user, scopes string
}

// actorFromClaims reads the actor from verified claims: tenant and user must
// be strings that pass domain.CheckID; the scopes claim is optional.
func actorFromClaims(payload []byte, names claimNames) (vocab.Actor, *TokenError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return vocab.Actor{}, refuse(ReasonMalformed, "the access token's claims are not a JSON object")
	}
	tenant, terr := identityClaim(m, names.tenant, ReasonTenant)
	if terr != nil {
		return vocab.Actor{}, terr
	}
	user, terr := identityClaim(m, names.user, ReasonUser)
	if terr != nil {
		return vocab.Actor{}, terr
	}
	scopes, err := parseScopes(m[names.scopes])
	if err != nil {
		return vocab.Actor{}, refuse(ReasonScope, fmt.Sprintf("the access token's %s claim: %v", names.scopes, err))
	}
	// jti names the token in audit rows when it looks like an id.
	tokenID, _ := idClaim(m["jti"])
	return vocab.Actor{TenantID: tenant, UserID: user, TokenID: tokenID, Scopes: scopes}, nil
}

// identityClaim returns the claim called name as a tenant or user id: a
// JSON string that passes domain.CheckID. A refusal says why, and one
// that CheckID made carries its *vocab.IdentityError (for the log).
func identityClaim(m map[string]json.RawMessage, name string, reason Reason) (string, *TokenError) {
	var s string
	if raw := m[name]; raw == nil || json.Unmarshal(raw, &s) != nil {
		return "", refuse(reason, fmt.Sprintf("the access token's %s claim is missing or not a string", name))
	}
	if err := vocab.CheckIdentity(name, s); err != nil {
		te := refuse(reason, fmt.Sprintf("the access token's %s claim is not an id (%s): it %s", name, vocab.IdentityRule, err.(*vocab.IdentityError).Reason))
		te.Identity = err.(*vocab.IdentityError)
		return "", te
	}
	return s, nil
}

// idClaim returns raw as a string if it is a JSON string that passes
// vocab.ValidID.
func idClaim(raw json.RawMessage) (string, bool) {
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil || !vocab.ValidID(s) {
		return "", false
	}
	return s, true
}

// parseScopes reads a scopes claim: absent or null (no scopes), a
// space-separated string (RFC 8693 §4.2 "scope") or an array of strings
// ("scp" of several servers). Each scope must be an RFC 6749 §3.3
// scope-token; duplicates are dropped, order is kept.
func parseScopes(raw json.RawMessage) ([]string, error) {
	if raw == nil || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var list []string
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		list = strings.Split(s, " ")
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("neither a string nor an array of strings")
	}
	var out []string
	seen := make(map[string]bool, len(list))
	for _, scope := range list {
		if scope == "" {
			continue // several spaces in a row, or leading/trailing ones
		}
		if !validScope(scope) {
			return nil, fmt.Errorf("a scope holds characters RFC 6749 does not allow")
		}
		if !seen[scope] {
			seen[scope] = true
			out = append(out, scope)
		}
	}
	return out, nil
}

// validScope reports whether s is a scope-token: %x21 / %x23-5B / %x5D-7E.
func validScope(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
