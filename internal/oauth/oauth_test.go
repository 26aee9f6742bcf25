package oauth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/oauth"
	"github.com/idemgate/idemgate/internal/oauth/oauthtest"
	"github.com/idemgate/idemgate/internal/vocab"
)

type testBundle struct {
	op  *oauthtest.Provider
	cfg oauth.Config
}

// setup starts a provider and returns a config for it; change cfg before
// newVerifier to vary it.
func setup(t *testing.T) *testBundle {
	t.Helper()
	op := oauthtest.Start(t, nil)
	return &testBundle{op: op, cfg: oauth.Config{
		Issuer:      op.Issuer(),
		Audience:    oauthtest.DefaultAudience,
		TenantClaim: "tenant",
	}}
}

func newVerifier(t *testing.T, cfg oauth.Config) *oauth.Verifier {
	t.Helper()
	v, err := oauth.New(t.Context(), &cfg)
	require.NoError(t, err)
	return v
}

// requireRefused requires err to be a *TokenError with reason, that
// wraps ErrInvalidToken and does not quote token.
func requireRefused(t *testing.T, err error, reason oauth.Reason, token string) {
	t.Helper()
	var te *oauth.TokenError
	require.ErrorAs(t, err, &te)
	require.Equal(t, reason, te.Reason, "detail: %s", te.Detail)
	require.ErrorIs(t, err, oauth.ErrInvalidToken)
	require.Equal(t, vocab.CodeUnauthenticated, vocab.CodeOf(err))
	require.NotErrorIs(t, err, vocab.ErrUnavailable)
	parts := strings.Split(token, ".")
	for _, p := range parts {
		if len(p) > 8 {
			require.NotContains(t, err.Error(), p)
		}
	}
}

func segments(t *testing.T, token string) []string {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	return parts
}

// editPayload decodes the payload, lets edit change the claims and encodes
// it again, keeping header and signature.
func editPayload(t *testing.T, token string, edit func(map[string]any)) string {
	t.Helper()
	parts := segments(t, token)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(raw, &claims))
	edit(claims)
	raw, err = json.Marshal(claims)
	require.NoError(t, err)
	parts[1] = base64.RawURLEncoding.EncodeToString(raw)
	return strings.Join(parts, ".")
}

// withHeader replaces the header, keeping payload and signature.
func withHeader(t *testing.T, token, header string) string {
	t.Helper()
	parts := segments(t, token)
	parts[0] = base64.RawURLEncoding.EncodeToString([]byte(header))
	return strings.Join(parts, ".")
}

func TestAuthenticateValid(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("ScopeString", func(t *testing.T) {
		t.Parallel()
		v := newVerifier(t, b.cfg)
		tok := b.op.Token(t, &oauthtest.TokenParams{Subject: "bot-7", Tenant: "acme", Scopes: []string{"billing:refund", "orders:read"}})
		actor, err := v.Authenticate(t.Context(), tok)
		require.NoError(t, err)
		require.Equal(t, "acme", actor.TenantID)
		require.Equal(t, "bot-7", actor.UserID)
		require.Equal(t, "bot-7", actor.Subject, "the verified sub, for operator rules")
		require.Equal(t, b.op.Issuer(), actor.Issuer)
		require.Equal(t, []string{"billing:refund", "orders:read"}, actor.Scopes)
		require.True(t, vocab.ValidID(actor.TokenID), "jti names the token")
	})
	t.Run("ScopeArrayAndOtherClaims", func(t *testing.T) {
		t.Parallel()
		cfg := b.cfg
		cfg.TenantClaim, cfg.UserClaim, cfg.ScopesClaim = "org_id", "uid", "scp"
		v := newVerifier(t, cfg)
		tok := b.op.Token(t, &oauthtest.TokenParams{Tenant: "org-9", TenantClaim: "org_id",
			Claims: map[string]any{"uid": "u-3", "scp": []string{"a", "b", "a"}}})
		actor, err := v.Authenticate(t.Context(), tok)
		require.NoError(t, err)
		require.Equal(t, vocab.Actor{TenantID: "org-9", UserID: "u-3", TokenID: actor.TokenID, Scopes: []string{"a", "b"},
			Issuer: b.op.Issuer(), Subject: oauthtest.DefaultSubject}, actor)
	})
	t.Run("NoScopes", func(t *testing.T) {
		t.Parallel()
		v := newVerifier(t, b.cfg)
		actor, err := v.Authenticate(t.Context(), b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme"}))
		require.NoError(t, err)
		require.Empty(t, actor.Scopes)
	})
	t.Run("TypAtJWT", func(t *testing.T) {
		t.Parallel()
		// The provider writes typ JWT; at+jwt must pass the header check
		// and then fail only at the signature, as the header is signed.
		v := newVerifier(t, b.cfg)
		tok := b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme"})
		_, err := v.Authenticate(t.Context(), withHeader(t, tok, `{"alg":"RS256","typ":"at+jwt"}`))
		requireRefused(t, err, oauth.ReasonSignature, tok)
	})
	t.Run("RFC8414Discovery", func(t *testing.T) {
		t.Parallel()
		op := oauthtest.Start(t, &oauthtest.Options{OAuthMetadataOnly: true})
		cfg := b.cfg
		cfg.Issuer = op.Issuer()
		v := newVerifier(t, cfg)
		actor, err := v.Authenticate(t.Context(), op.Token(t, &oauthtest.TokenParams{Tenant: "acme"}))
		require.NoError(t, err)
		require.Equal(t, "acme", actor.TenantID)
	})
	t.Run("KeyRotation", func(t *testing.T) {
		t.Parallel()
		op := oauthtest.Start(t, nil)
		cfg := b.cfg
		cfg.Issuer = op.Issuer()
		v := newVerifier(t, cfg)
		_, err := v.Authenticate(t.Context(), op.Token(t, &oauthtest.TokenParams{Tenant: "acme"}))
		require.NoError(t, err)
		op.RotateKey(t)
		_, err = v.Authenticate(t.Context(), op.Token(t, &oauthtest.TokenParams{Tenant: "acme"}))
		require.NoError(t, err, "an unknown kid refetches the JWKS")
	})
	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		v := newVerifier(t, b.cfg)
		tok := b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme"})
		var wg sync.WaitGroup
		errs := make([]error, 16)
		for i := range errs {
			wg.Go(func() { _, errs[i] = v.Authenticate(t.Context(), tok) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
	})
}

func TestAuthenticateRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := oauthtest.Start(t, nil)
	valid := b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme", Scopes: []string{"a"}})

	tests := []struct {
		name   string
		token  func(t *testing.T) string
		cfg    func(cfg *oauth.Config)
		reason oauth.Reason
	}{
		{name: "Expired", token: func(*testing.T) string { return valid },
			cfg: func(cfg *oauth.Config) {
				cfg.Now = func() time.Time { return time.Now().Add(oauthtest.DefaultLifetime + time.Second) }
			},
			reason: oauth.ReasonExpired},
		{name: "WrongAudience", reason: oauth.ReasonAudience, token: func(t *testing.T) string {
			return b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme", Audience: []string{"https://elsewhere.test"}})
		}},
		{name: "WrongIssuer", reason: oauth.ReasonIssuer, token: func(t *testing.T) string {
			return other.Token(t, &oauthtest.TokenParams{Tenant: "acme"})
		}},
		{name: "TamperedClaim", reason: oauth.ReasonSignature, token: func(t *testing.T) string {
			return editPayload(t, valid, func(c map[string]any) { c["tenant"] = "evil" })
		}},
		{name: "TamperedSignature", reason: oauth.ReasonSignature, token: func(t *testing.T) string {
			parts := segments(t, valid)
			sig, err := base64.RawURLEncoding.DecodeString(parts[2])
			require.NoError(t, err)
			sig[len(sig)/2] ^= 0x01
			parts[2] = base64.RawURLEncoding.EncodeToString(sig)
			return strings.Join(parts, ".")
		}},
		{name: "AlgNone", reason: oauth.ReasonAlgorithm, token: func(t *testing.T) string {
			parts := segments(t, withHeader(t, valid, `{"alg":"none","typ":"JWT"}`))
			return parts[0] + "." + parts[1] + "."
		}},
		{name: "AlgHS256", reason: oauth.ReasonAlgorithm, token: func(t *testing.T) string {
			return withHeader(t, valid, `{"alg":"HS256","typ":"JWT"}`)
		}},
		{name: "TypeNotAccessToken", reason: oauth.ReasonType, token: func(t *testing.T) string {
			return withHeader(t, valid, `{"alg":"RS256","typ":"dpop+jwt"}`)
		}},
		{name: "MissingTenant", reason: oauth.ReasonTenant, token: func(t *testing.T) string {
			return b.op.Token(t, &oauthtest.TokenParams{Scopes: []string{"a"}})
		}},
		{name: "TenantNotAnID", reason: oauth.ReasonTenant, token: func(t *testing.T) string {
			return b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme\ncorp"})
		}},
		{name: "TenantNotAString", reason: oauth.ReasonTenant, token: func(t *testing.T) string {
			return b.op.Token(t, &oauthtest.TokenParams{Claims: map[string]any{"tenant": 42}})
		}},
		{name: "MissingUser", reason: oauth.ReasonUser,
			cfg: func(cfg *oauth.Config) { cfg.UserClaim = "uid" },
			token: func(t *testing.T) string {
				return b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme"})
			}},
		{name: "UserNotAnID", reason: oauth.ReasonUser, token: func(t *testing.T) string {
			return b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme", Subject: strings.Repeat("u", 256)})
		}},
		{name: "ScopesNotStrings", reason: oauth.ReasonScope, token: func(t *testing.T) string {
			return b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme", Claims: map[string]any{"scope": []int{1}}})
		}},
		{name: "Empty", reason: oauth.ReasonEmptyToken, token: func(*testing.T) string { return "" }},
		{name: "NotAJWT", reason: oauth.ReasonMalformed, token: func(*testing.T) string { return "igt_opaque-token" }},
		{name: "JWE", reason: oauth.ReasonEncrypted, token: func(*testing.T) string { return "a.b.c.d.e" }},
		{name: "TooLarge", reason: oauth.ReasonTooLarge, token: func(*testing.T) string {
			return strings.Repeat("a", oauth.MaxTokenBytes+1)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := b.cfg
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			v := newVerifier(t, cfg)
			tok := tt.token(t)
			_, err := v.Authenticate(t.Context(), tok)
			requireRefused(t, err, tt.reason, tok)
		})
	}

	t.Run("FlippedPayloadByte", func(t *testing.T) {
		t.Parallel()
		v := newVerifier(t, b.cfg)
		parts := segments(t, valid)
		// Flip one character of every position in turn: whatever it
		// decodes to, the token is refused as a token, never accepted.
		for i := 0; i < len(parts[1]); i += 7 {
			p := []byte(parts[1])
			if p[i] == 'A' {
				p[i] = 'B'
			} else {
				p[i] = 'A'
			}
			tok := parts[0] + "." + string(p) + "." + parts[2]
			_, err := v.Authenticate(t.Context(), tok)
			var te *oauth.TokenError
			require.ErrorAs(t, err, &te, "position %d", i)
		}
	})
}

func TestAuthenticateUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := newVerifier(t, b.cfg) // New contacts nobody: the provider may be down
	tok1 := b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme"})

	requireUnavailable := func(t *testing.T, err error) {
		t.Helper()
		require.ErrorIs(t, err, vocab.ErrUnavailable)
		var te *oauth.TokenError
		require.False(t, errors.As(err, &te), "not a token error: %v", err)
	}

	// Down before the first call: discovery fails, and is retried.
	b.op.Stop()
	_, err := v.Authenticate(t.Context(), tok1)
	requireUnavailable(t, err)
	requireUnavailable(t, v.Discover(t.Context()))

	b.op.Restart(t)
	actor, err := v.Authenticate(t.Context(), tok1)
	require.NoError(t, err)
	require.Equal(t, "acme", actor.TenantID)

	// Down after discovery: known keys keep working; a token signed with a
	// key the verifier has not seen cannot be told, until the provider is back.
	b.op.RotateKey(t)
	tok2 := b.op.Token(t, &oauthtest.TokenParams{Tenant: "acme"})
	b.op.Stop()
	_, err = v.Authenticate(t.Context(), tok1)
	require.NoError(t, err)
	_, err = v.Authenticate(t.Context(), tok2)
	requireUnavailable(t, err)

	b.op.Restart(t)
	_, err = v.Authenticate(t.Context(), tok2)
	require.NoError(t, err)

	t.Run("ContextDone", func(t *testing.T) {
		t.Parallel()
		v := newVerifier(t, b.cfg)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := v.Authenticate(ctx, tok1)
		require.ErrorIs(t, err, vocab.ErrUnavailable)
		require.ErrorIs(t, err, context.Canceled)
	})
}
