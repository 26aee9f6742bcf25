// Package oauthtest runs a real OpenID provider (zitadel's op package) for
// tests: over plain HTTP on 127.0.0.1, with discovery, a JWKS endpoint and a
// token endpoint that issues JWT access tokens through the
// client-credentials grant, carrying the claims a test asks for.
package oauthtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Defaults of TokenParams.
const (
	// DefaultAudience is the aud of a token whose TokenParams.Audience is nil.
	DefaultAudience = "https://idemgate.test/mcp"
	// DefaultSubject is the sub of a token whose TokenParams.Subject is "".
	DefaultSubject = "user-1"
	// DefaultTenantClaim names the tenant claim when TokenParams.TenantClaim
	// is "".
	DefaultTenantClaim = "tenant"
	// DefaultLifetime is a token's lifetime when TokenParams.Lifetime is 0.
	DefaultLifetime = 5 * time.Minute
)

// Options configures a Provider. The zero value (or nil) is an OpenID
// provider.
type Options struct {
	// OAuthMetadataOnly makes the provider answer 404 at
	// /.well-known/openid-configuration and serve the same document at the
	// RFC 8414 path /.well-known/oauth-authorization-server, as a plain
	// OAuth authorization server does.
	OAuthMetadataOnly bool
}

// Provider is a running OpenID provider.
type Provider struct {
	issuer  string
	addr    string
	handler http.Handler
	storage *storage

	mu  sync.Mutex
	srv *httptest.Server // nil while stopped
}

// Start runs a provider until the test ends. opts may be nil.
func Start(t testing.TB, opts *Options) *Provider {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("oauthtest: listen: %v", err)
	}
	p := &Provider{
		issuer:  "http://" + l.Addr().String(),
		addr:    l.Addr().String(),
		storage: &storage{clients: map[string]*client{}},
	}
	p.storage.addKey(newKey(t))
	config := &op.Config{
		CryptoKey:      [32]byte(randomBytes(t, 32)),
		CodeMethodS256: true,
		AuthMethodPost: true,
	}
	provider, err := op.NewProvider(config, p.storage, op.StaticIssuer(p.issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatalf("oauthtest: new provider: %v", err)
	}
	p.handler = provider
	if opts.OAuthMetadataOnly {
		p.handler = oauthMetadataOnly(provider)
	}
	p.serve(l)
	t.Cleanup(p.Stop)
	return p
}

// oauthMetadataOnly moves the discovery document to the RFC 8414 path.
func oauthMetadataOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			http.NotFound(w, r)
			return
		case "/.well-known/oauth-authorization-server":
			r = r.Clone(r.Context())
			r.URL.Path = "/.well-known/openid-configuration"
		}
		next.ServeHTTP(w, r)
	})
}

func (p *Provider) serve(l net.Listener) {
	srv := httptest.NewUnstartedServer(p.handler)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
}

// Issuer is the provider's issuer URL, http://127.0.0.1:port.
func (p *Provider) Issuer() string { return p.issuer }

// TokenURL is the provider's token endpoint.
func (p *Provider) TokenURL() string { return p.issuer + "/oauth/token" }

// Stop stops serving: connections are refused until Restart. It is safe to
// call more than once.
func (p *Provider) Stop() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Restart serves again on the same address, with the same keys and clients.
func (p *Provider) Restart(t testing.TB) {
	t.Helper()
	p.Stop()
	var l net.Listener
	var err error
	for range 50 { // the port may take a moment to be free again
		if l, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("oauthtest: listen again on %s: %v", p.addr, err)
	}
	p.serve(l)
}

// RotateKey makes a new signing key: tokens issued from now on are signed
// with it and name its kid; the JWKS publishes it beside the old ones.
func (p *Provider) RotateKey(t testing.TB) {
	t.Helper()
	p.storage.addKey(newKey(t))
}

// TokenParams are the claims of an access token.
type TokenParams struct {
	// Subject is sub. Default: DefaultSubject.
	Subject string
	// Tenant is the tenant id; "" leaves the tenant claim out.
	Tenant string
	// TenantClaim names the tenant claim. Default: DefaultTenantClaim.
	TenantClaim string
	// Scopes are requested in the token request and written to the scope
	// claim as a space-separated string; none leaves the claim out.
	Scopes []string
	// Audience is aud. Default: []string{DefaultAudience}.
	Audience []string
	// Lifetime is exp minus now. Default: DefaultLifetime.
	Lifetime time.Duration
	// Claims are added to the token as they are (they win over Tenant and
	// the scope claim, not over the registered claims).
	Claims map[string]any
}

func (tp *TokenParams) withDefaults() TokenParams {
	out := TokenParams{}
	if tp != nil {
		out = *tp
	}
	if out.Subject == "" {
		out.Subject = DefaultSubject
	}
	if out.TenantClaim == "" {
		out.TenantClaim = DefaultTenantClaim
	}
	if out.Audience == nil {
		out.Audience = []string{DefaultAudience}
	}
	if out.Lifetime == 0 {
		out.Lifetime = DefaultLifetime
	}
	return out
}

// RegisterClient registers a confidential client whose client-credentials
// tokens carry params (nil means the defaults, and no tenant), and returns
// its id and secret, for a test whose own client fetches tokens from
// TokenURL.
func (p *Provider) RegisterClient(params *TokenParams) (clientID, clientSecret string) {
	c := &client{id: "client-" + uuid.NewString(), secret: uuid.NewString(), params: params.withDefaults()}
	p.storage.addClient(c)
	return c.id, c.secret
}

// Token returns an access token with params, fetched from the provider's
// token endpoint over HTTP with the client-credentials grant.
func (p *Provider) Token(t testing.TB, params *TokenParams) string {
	t.Helper()
	id, secret := p.RegisterClient(params)
	form := url.Values{"grant_type": {"client_credentials"}}
	if params != nil && len(params.Scopes) > 0 {
		form.Set("scope", strings.Join(params.Scopes, " "))
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.TokenURL(), strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatalf("oauthtest: token request: %v", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("oauthtest: token request: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("oauthtest: token response (%s): %v", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || body.AccessToken == "" {
		t.Fatalf("oauthtest: token response %s: %s: %s", resp.Status, body.Error, body.Description)
	}
	return body.AccessToken
}

func newKey(t testing.TB) *signingKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("oauthtest: generate key: %v", err)
	}
	return &signingKey{id: uuid.NewString(), key: key}
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("oauthtest: random: %v", err)
	}
	return b
}
