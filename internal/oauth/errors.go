package oauth

import (
	"github.com/idemgate/idemgate/internal/vocab"
)

// ErrInvalidToken is what every refused access token is (compare with
// errors.Is): a *domain.Error with code domain.CodeUnauthenticated. The
// *TokenError that wraps it says why.
var ErrInvalidToken error = &vocab.Error{
	Code:    vocab.CodeUnauthenticated,
	Message: "a valid access token is required",
}

// Reason is why an access token was refused.
type Reason string

// The reasons a token is refused.
const (
	ReasonMalformed  Reason = "malformed"   // not a signed JWT, or claims that do not parse
	ReasonAlgorithm  Reason = "algorithm"   // alg is none, symmetric or unknown
	ReasonType       Reason = "type"        // typ is neither absent, JWT nor at+jwt
	ReasonIssuer     Reason = "issuer"      // iss is not the configured issuer
	ReasonAudience   Reason = "audience"    // aud does not hold the configured audience
	ReasonExpired    Reason = "expired"     // exp is missing or past
	ReasonNotYet     Reason = "not_yet"     // nbf is in the future
	ReasonSignature  Reason = "signature"   // no key of the issuer verifies the signature
	ReasonTenant     Reason = "tenant"      // the tenant claim is missing or not a valid id
	ReasonUser       Reason = "user"        // the user claim is missing or not a valid id
	ReasonScope      Reason = "scope"       // the scopes claim is neither a string nor an array of strings
	ReasonTooLarge   Reason = "too_large"   // longer than MaxTokenBytes
	ReasonEncrypted  Reason = "encrypted"   // a JWE: only signed tokens are accepted
	ReasonEmptyToken Reason = "empty_token" // no token at all
)

// TokenError is a refused access token. Detail says what is wrong in words
// fit for an error_description; it never quotes the token.
type TokenError struct {
	Reason Reason
	Detail string
	// Identity is set when a tenant or user claim failed domain.CheckID.
	Identity *vocab.IdentityError
}

func (e *TokenError) Error() string { return "oauth: invalid access token: " + e.Detail }

// Unwrap returns ErrInvalidToken, and Identity when set.
func (e *TokenError) Unwrap() []error {
	if e.Identity != nil {
		return []error{ErrInvalidToken, e.Identity}
	}
	return []error{ErrInvalidToken}
}

func refuse(r Reason, detail string) *TokenError { return &TokenError{Reason: r, Detail: detail} }

// unavailableError is an authorization server whose metadata or keys could
// not be fetched: the token can be neither accepted nor refused.
type unavailableError struct {
	what string
	err  error
}

func (e *unavailableError) Error() string {
	return "oauth: authorization server unavailable: " + e.what + ": " + e.err.Error()
}

// Unwrap returns vocab.ErrUnavailable and the cause (a network error, a
// context error, a bad status).
func (e *unavailableError) Unwrap() []error { return []error{vocab.ErrUnavailable, e.err} }
