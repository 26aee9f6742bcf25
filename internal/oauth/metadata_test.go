package oauth_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/oauth"
	"github.com/idemgate/idemgate/internal/vocab"
)

// staticConfig is a valid config whose issuer is never contacted.
func staticConfig() oauth.Config {
	return oauth.Config{
		Issuer:      "https://auth.example.com",
		Audience:    "https://api.example.com/mcp",
		TenantClaim: "tenant",
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*oauth.Config)
		field string // named in the error
	}{
		{"NoIssuer", func(c *oauth.Config) { c.Issuer = "" }, "Issuer"},
		{"IssuerNotURL", func(c *oauth.Config) { c.Issuer = "auth.example.com" }, "Issuer"},
		{"IssuerPlainHTTP", func(c *oauth.Config) { c.Issuer = "http://auth.example.com" }, "Issuer"},
		{"IssuerFragment", func(c *oauth.Config) { c.Issuer = "https://auth.example.com/#x" }, "Issuer"},
		{"IssuerQuery", func(c *oauth.Config) { c.Issuer = "https://auth.example.com/?t=1" }, "Issuer"},
		{"NoAudience", func(c *oauth.Config) { c.Audience = "" }, "Audience"},
		{"AudienceNotURLNoResource", func(c *oauth.Config) { c.Audience = "api://idemgate" }, "Resource"},
		{"ResourceQuery", func(c *oauth.Config) { c.Resource = "https://api.example.com/mcp?x=1" }, "Resource"},
		{"NoTenantClaim", func(c *oauth.Config) { c.TenantClaim = "" }, "TenantClaim"},
		{"BadScope", func(c *oauth.Config) { c.ScopesSupported = []string{"a b"} }, "ScopesSupported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := staticConfig()
			tt.edit(&cfg)
			_, err := oauth.New(t.Context(), &cfg)
			require.Error(t, err)
			require.Contains(t, err.Error(), "Config."+tt.field)
		})
	}

	t.Run("Nil", func(t *testing.T) {
		t.Parallel()
		_, err := oauth.New(t.Context(), nil)
		require.Error(t, err)
	})
	t.Run("LoopbackHTTPAndOpaqueAudience", func(t *testing.T) {
		t.Parallel()
		cfg := oauth.Config{Issuer: "http://127.0.0.1:9/", Audience: "api://idemgate",
			Resource: "http://localhost:8080/mcp", TenantClaim: "org_id"}
		_, err := oauth.New(t.Context(), &cfg)
		require.NoError(t, err)
	})
}

func TestMetadataPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		resource, path, url string
	}{
		{"https://api.example.com", "/.well-known/oauth-protected-resource",
			"https://api.example.com/.well-known/oauth-protected-resource"},
		{"https://api.example.com/", "/.well-known/oauth-protected-resource",
			"https://api.example.com/.well-known/oauth-protected-resource"},
		{"https://api.example.com/mcp", "/.well-known/oauth-protected-resource/mcp",
			"https://api.example.com/.well-known/oauth-protected-resource/mcp"},
		{"https://api.example.com:8443/t/a/mcp", "/.well-known/oauth-protected-resource/t/a/mcp",
			"https://api.example.com:8443/.well-known/oauth-protected-resource/t/a/mcp"},
	}
	for _, tt := range tests {
		t.Run(tt.resource, func(t *testing.T) {
			t.Parallel()
			cfg := staticConfig()
			cfg.Resource = tt.resource
			v := newVerifier(t, cfg)
			require.Equal(t, tt.path, v.MetadataPath())
			require.Equal(t, tt.url, v.MetadataURL())
		})
	}
}

func TestMetadata(t *testing.T) {
	t.Parallel()

	get := func(t *testing.T, v *oauth.Verifier, method string) *httptest.ResponseRecorder {
		t.Helper()
		rec := httptest.NewRecorder()
		v.Metadata().ServeHTTP(rec, httptest.NewRequest(method, v.MetadataPath(), nil))
		return rec
	}

	t.Run("RFC9728Document", func(t *testing.T) {
		t.Parallel()
		cfg := staticConfig()
		cfg.ScopesSupported = []string{"billing:refund", "orders:read"}
		cfg.ResourceName = "idemgate"
		v := newVerifier(t, cfg)
		rec := get(t, v, http.MethodGet)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))

		var doc map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &doc))
		// RFC 9728 §2: resource is required, an https URL without fragment;
		// §3.3: it is the identifier the metadata URL was made from.
		resource, ok := doc["resource"].(string)
		require.True(t, ok, "resource is a string")
		u, err := url.Parse(resource)
		require.NoError(t, err)
		require.Equal(t, "https", u.Scheme)
		require.Empty(t, u.Fragment)
		require.Equal(t, cfg.Audience, resource)
		require.Equal(t, u.Scheme+"://"+u.Host+"/.well-known/oauth-protected-resource"+u.Path, v.MetadataURL())
		// The optional members, each of its type.
		require.Equal(t, []any{cfg.Issuer}, doc["authorization_servers"])
		require.Equal(t, []any{"header"}, doc["bearer_methods_supported"])
		require.Equal(t, []any{"billing:refund", "orders:read"}, doc["scopes_supported"])
		require.Equal(t, "idemgate", doc["resource_name"])
		for k := range doc {
			require.Contains(t, []string{"resource", "authorization_servers", "bearer_methods_supported",
				"scopes_supported", "resource_name"}, k)
		}
	})
	t.Run("OptionalMembersLeftOut", func(t *testing.T) {
		t.Parallel()
		rec := get(t, newVerifier(t, staticConfig()), http.MethodGet)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &doc))
		require.NotContains(t, doc, "scopes_supported")
		require.NotContains(t, doc, "resource_name")
	})
	t.Run("HEAD", func(t *testing.T) {
		t.Parallel()
		rec := get(t, newVerifier(t, staticConfig()), http.MethodHead)
		require.Equal(t, http.StatusOK, rec.Code)
	})
	t.Run("POSTRefused", func(t *testing.T) {
		t.Parallel()
		rec := get(t, newVerifier(t, staticConfig()), http.MethodPost)
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
		require.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
	})
}

func TestChallenge(t *testing.T) {
	t.Parallel()
	const base = `Bearer resource_metadata="https://api.example.com/.well-known/oauth-protected-resource/mcp"`
	v := newVerifier(t, staticConfig())

	t.Run("NoToken", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, base, v.Challenge(nil))
	})
	t.Run("TokenError", func(t *testing.T) {
		t.Parallel()
		err := &oauth.TokenError{Reason: oauth.ReasonExpired, Detail: "the access token expired"}
		require.Equal(t, base+`, error="invalid_token", error_description="the access token expired"`, v.Challenge(err))
		wrapped := errors.Join(errors.New("authenticate"), err)
		require.Equal(t, v.Challenge(err), v.Challenge(wrapped))
	})
	t.Run("Unavailable", func(t *testing.T) {
		t.Parallel()
		err := errors.Join(vocab.ErrUnavailable, errors.New("connection refused"))
		require.Equal(t, base, v.Challenge(err))
	})
	t.Run("DescriptionQuoted", func(t *testing.T) {
		t.Parallel()
		err := &oauth.TokenError{Reason: oauth.ReasonTenant, Detail: "claim \"t\\x\"\n is missing"}
		c := v.Challenge(err)
		require.True(t, strings.HasSuffix(c, `error_description="claim tx is missing"`), c)
	})
	t.Run("Scope", func(t *testing.T) {
		t.Parallel()
		cfg := staticConfig()
		cfg.ScopesSupported = []string{"a", "b"}
		require.Equal(t, base+`, scope="a b"`, newVerifier(t, cfg).Challenge(nil))
	})
}
