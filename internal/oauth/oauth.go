// Package oauth makes idemgate an OAuth 2.1 resource server: it accepts JWT
// access tokens (RFC 9068) signed by one authorization server, turns their
// claims into a vocab.Actor, and publishes the protected resource metadata
// (RFC 9728) that MCP clients use to find that server.
//
// Tokens are verified with github.com/coreos/go-oidc/v3: it is small, widely
// used and maintained, checks iss, aud and exp, and takes the signature's
// check from a key set. Ours (remoteKeys, on go-jose) caches the issuer's
// JWKS and refetches it when a token names a key it does not hold (key
// rotation), at most once per MinRefetchInterval, one fetch shared by
// concurrent callers. This package adds what go-oidc
// leaves to its caller for access tokens: the typ header, the tenant, user
// and scopes claims, refusal reasons, lazy discovery with RFC 8414 fallback,
// and errors that tell an unreachable server from a bad token.
package oauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/idemgate/idemgate/internal/vocab"
)

// Defaults of Config.
const (
	// DefaultUserClaim is the claim the user id is read from.
	DefaultUserClaim = "sub"
	// DefaultScopesClaim is the claim the scopes are read from.
	DefaultScopesClaim = "scope"
	// DefaultHTTPTimeout bounds each request to the authorization server
	// when Config.HTTPClient is nil.
	DefaultHTTPTimeout = 10 * time.Second
)

// Config configures a Verifier.
type Config struct {
	// Issuer is the authorization server's issuer URL, exactly as tokens
	// carry it in iss. Its metadata (OpenID Connect discovery, else RFC
	// 8414) gives the jwks_uri. https, or http on a loopback host. Required.
	Issuer string
	// Audience is the aud access tokens must hold (usually the resource
	// URL). Required.
	Audience string
	// Resource is this resource's identifier for RFC 9728 metadata: an
	// https URL (http on a loopback host) without query or fragment.
	// Default: Audience.
	Resource string
	// ResourceName is a human-readable name published in the metadata.
	// Optional.
	ResourceName string
	// TenantClaim is the claim holding the tenant id, such as "tenant" or
	// "org_id". Required.
	TenantClaim string
	// UserClaim is the claim holding the user id. Default: DefaultUserClaim.
	UserClaim string
	// ScopesClaim is the claim holding the scopes, a space-separated string
	// or an array of strings. Default: DefaultScopesClaim.
	ScopesClaim string
	// ScopesSupported are published in the metadata and in challenges.
	// Optional.
	ScopesSupported []string
	// HTTPClient fetches the issuer's metadata and keys. Default: a client
	// with DefaultHTTPTimeout.
	HTTPClient *http.Client
	// Now is the clock for exp and nbf. Default: time.Now.
	Now func() time.Time
}

// validate checks cfg, naming the field at fault.
func (cfg *Config) validate() error {
	if err := checkURL("Issuer", cfg.Issuer); err != nil {
		return err
	}
	if cfg.Audience == "" {
		return errors.New("oauth: Config.Audience is required")
	}
	resource := cfg.Resource
	field := "Resource"
	if resource == "" {
		resource, field = cfg.Audience, "Resource (defaulted to Audience)"
	}
	if err := checkURL(field, resource); err != nil {
		return err
	}
	if cfg.TenantClaim == "" {
		return errors.New("oauth: Config.TenantClaim is required")
	}
	for _, s := range cfg.ScopesSupported {
		if !validScope(s) {
			return fmt.Errorf("oauth: Config.ScopesSupported: %q is not an RFC 6749 scope-token", s)
		}
	}
	return nil
}

// checkURL checks that s is an https URL, or http on a loopback host,
// without query or fragment.
func checkURL(field, s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return fmt.Errorf("oauth: Config.%s is required", field)
	case err != nil:
		return fmt.Errorf("oauth: Config.%s: %w", field, err)
	case !secureURL(u):
		return fmt.Errorf("oauth: Config.%s %q must be an https URL (or http on a loopback host)", field, s)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return fmt.Errorf("oauth: Config.%s %q must not have a fragment", field, s)
	case u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("oauth: Config.%s %q must not have a query", field, s)
	}
	return nil
}

// secureURL reports whether u is absolute https, or http on a loopback host
// (local development and tests).
func secureURL(u *url.URL) bool {
	if !u.IsAbs() || u.Host == "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		host := u.Hostname()
		ip := net.ParseIP(host)
		return host == "localhost" || (ip != nil && ip.IsLoopback())
	}
	return false
}

// Verifier authenticates bearer tokens as a resource server. It is safe for
// concurrent use.
type Verifier struct {
	issuer   string
	audience string
	names    claimNames
	client   *http.Client
	now      func() time.Time
	baseCtx  context.Context

	// Published metadata and the challenge's fixed part, built by New.
	metadataPath string
	metadataURL  string
	metadataJSON []byte
	scopes       string

	// discoverMu is a one-slot semaphore: one discovery at a time, and a
	// waiter gives up when its context ends.
	discoverMu chan struct{}
	verifier   atomic.Pointer[oidc.IDTokenVerifier]
}

// New returns a Verifier for cfg, or an error naming the field that is
// wrong. It contacts nobody: the issuer's metadata is fetched by the first
// Authenticate (or Discover) and again by each call after a failure, so an
// authorization server that is down at start, or restarts, does not stop
// this process. ctx is kept, without its cancellation, as the base context
// of background key fetches.
func New(ctx context.Context, cfg *Config) (*Verifier, error) {
	if cfg == nil {
		return nil, errors.New("oauth: Config is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	v := &Verifier{
		issuer:     cfg.Issuer,
		audience:   cfg.Audience,
		names:      claimNames{tenant: cfg.TenantClaim, user: cfg.UserClaim, scopes: cfg.ScopesClaim},
		client:     cfg.HTTPClient,
		now:        cfg.Now,
		baseCtx:    context.WithoutCancel(ctx),
		scopes:     strings.Join(cfg.ScopesSupported, " "),
		discoverMu: make(chan struct{}, 1),
	}
	if v.names.user == "" {
		v.names.user = DefaultUserClaim
	}
	if v.names.scopes == "" {
		v.names.scopes = DefaultScopesClaim
	}
	if v.client == nil {
		v.client = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if v.now == nil {
		v.now = time.Now
	}
	if err := v.buildMetadata(cfg); err != nil {
		return nil, err
	}
	return v, nil
}

// Discover fetches the issuer's metadata if no call has yet. It is optional
// (Authenticate discovers on demand); use it to warm up or to report at
// start whether the authorization server is reachable. Its error wraps
// vocab.ErrUnavailable.
func (v *Verifier) Discover(ctx context.Context) error {
	_, err := v.idTokenVerifier(ctx)
	return err
}

// Authenticate returns the actor a JWT access token acts for. A refused
// token is a *TokenError (wrapping ErrInvalidToken) that says why; an
// authorization server whose metadata or keys cannot be fetched gives an
// error wrapping vocab.ErrUnavailable.
func (v *Verifier) Authenticate(ctx context.Context, bearer string) (vocab.Actor, error) {
	_, payload, terr := split(bearer)
	if terr != nil {
		return vocab.Actor{}, terr
	}
	if terr := checkRegistered(payload, v.issuer, v.audience, v.now()); terr != nil {
		return vocab.Actor{}, terr
	}
	idv, err := v.idTokenVerifier(ctx)
	if err != nil {
		return vocab.Actor{}, err
	}
	var ks keySetResult
	tok, err := idv.Verify(context.WithValue(ctx, keySetResultKey{}, &ks), bearer)
	if err != nil {
		return vocab.Actor{}, classify(err, ks.err)
	}
	var claims []byte
	if err := tok.Claims(&jsonRaw{&claims}); err != nil {
		return vocab.Actor{}, refuse(ReasonMalformed, "the access token's claims do not parse")
	}
	actor, terr := actorFromClaims(claims, v.names)
	if terr != nil {
		return vocab.Actor{}, terr
	}
	actor.Issuer, actor.Subject = tok.Issuer, tok.Subject
	return actor, nil
}

// classify turns go-oidc's error into ours. go-oidc formats the key set's
// error with %v, so the key set's own error (keyErr) is looked at instead:
// remoteKeys wraps a failed JWKS fetch (network, status, context) in a
// fetchError, and returns an error that wraps nothing when it holds the
// keys and none verifies the signature.
func classify(err, keyErr error) error {
	var expired *oidc.TokenExpiredError
	switch {
	case keyErr != nil && errors.Unwrap(keyErr) != nil:
		return &unavailableError{what: "fetch keys", err: keyErr}
	case keyErr != nil:
		return refuse(ReasonSignature, "the access token's signature does not verify with the issuer's keys")
	case errors.As(err, &expired):
		return refuse(ReasonExpired, "the access token expired")
	}
	return refuse(ReasonMalformed, "the access token was refused")
}

// idTokenVerifier returns the go-oidc verifier, discovering the issuer's
// jwks_uri first if no call has done so.
func (v *Verifier) idTokenVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	if idv := v.verifier.Load(); idv != nil {
		return idv, nil
	}
	select {
	case v.discoverMu <- struct{}{}:
	case <-ctx.Done():
		return nil, &unavailableError{what: "discovery", err: ctx.Err()}
	}
	defer func() { <-v.discoverMu }()
	if idv := v.verifier.Load(); idv != nil {
		return idv, nil
	}
	jwksURL, err := discover(ctx, v.client, v.issuer)
	if err != nil {
		return nil, &unavailableError{what: "discovery", err: err}
	}
	keys := &keySet{remote: newRemoteKeys(jwksURL, v.client, v.now)}
	idv := oidc.NewVerifier(v.issuer, keys, &oidc.Config{
		ClientID:             v.audience,
		SupportedSigningAlgs: signingAlgs,
		Now:                  v.now,
	})
	v.verifier.Store(idv)
	return idv, nil
}

// keySet passes signatures to the issuer's keys (remoteKeys) and keeps
// their error for the caller of Verify, which go-oidc only gives flattened
// to a string.
type keySet struct{ remote *remoteKeys }

type (
	keySetResultKey struct{}
	keySetResult    struct{ err error }
)

func (k *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	payload, err := k.remote.VerifySignature(ctx, jwt)
	if r, ok := ctx.Value(keySetResultKey{}).(*keySetResult); ok && err != nil {
		r.err = err
	}
	return payload, err
}

// jsonRaw receives the claims as they were signed.
type jsonRaw struct{ b *[]byte }

func (j *jsonRaw) UnmarshalJSON(b []byte) error {
	*j.b = append([]byte(nil), b...)
	return nil
}
