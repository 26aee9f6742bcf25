package oauthtest_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/oauth/oauthtest"
)

func claims(t *testing.T, token string) (header, payload map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	for i, into := range []*map[string]any{&header, &payload} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, into))
	}
	return header, payload
}

func TestToken(t *testing.T) {
	t.Parallel()
	p := oauthtest.Start(t, nil)

	t.Run("ClaimsAskedFor", func(t *testing.T) {
		t.Parallel()
		tok := p.Token(t, &oauthtest.TokenParams{Subject: "bot-7", Tenant: "acme", Scopes: []string{"a", "b"},
			Audience: []string{"https://x.test"}, Claims: map[string]any{"scp": []string{"c"}}})
		h, c := claims(t, tok)
		require.Equal(t, "RS256", h["alg"])
		require.NotEmpty(t, h["kid"])
		require.Equal(t, p.Issuer(), c["iss"])
		require.Equal(t, "bot-7", c["sub"])
		require.Equal(t, "acme", c["tenant"])
		require.Equal(t, "a b", c["scope"])
		require.Equal(t, []any{"c"}, c["scp"])
		require.Equal(t, []any{"https://x.test"}, c["aud"])
	})
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		_, c := claims(t, p.Token(t, nil))
		require.Equal(t, oauthtest.DefaultSubject, c["sub"])
		require.Equal(t, []any{oauthtest.DefaultAudience}, c["aud"])
		require.NotContains(t, c, "tenant")
		require.NotContains(t, c, "scope")
	})
}

func TestStopAndRestart(t *testing.T) {
	t.Parallel()
	p := oauthtest.Start(t, nil)
	discovery := p.Issuer() + "/.well-known/openid-configuration"
	resp, err := http.Get(discovery)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	p.Stop()
	_, err = http.Get(discovery)
	require.Error(t, err)

	p.Restart(t)
	resp, err = http.Get(discovery)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestOAuthMetadataOnly(t *testing.T) {
	t.Parallel()
	p := oauthtest.Start(t, &oauthtest.Options{OAuthMetadataOnly: true})
	resp, err := http.Get(p.Issuer() + "/.well-known/openid-configuration")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	resp, err = http.Get(p.Issuer() + "/.well-known/oauth-authorization-server")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	require.Equal(t, p.Issuer(), doc.Issuer)
	require.NotEmpty(t, doc.JWKSURI)
}
