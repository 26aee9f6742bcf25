package tenancy_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
)

func TestNewToken(t *testing.T) {
	t.Parallel()
	secretRe := regexp.MustCompile(`^idg_[A-Za-z0-9_-]{43}$`)
	idRe := regexp.MustCompile(`^tok_[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for range 100 {
		secret, id, err := tenancy.NewToken()
		require.NoError(t, err)
		require.Regexp(t, secretRe, secret)
		require.Regexp(t, idRe, id)
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(secret, "idg_"))
		require.NoError(t, err)
		require.Len(t, raw, 32)
		require.True(t, tokenspec.WellFormed(secret))
		require.False(t, seen[secret] || seen[id], "repeated secret or id")
		seen[secret], seen[id] = true, true
	}
}

func TestHashToken(t *testing.T) {
	t.Parallel()
	want := sha256.Sum256([]byte("idg_test_acme"))
	require.Equal(t, want[:], tenancy.HashToken("idg_test_acme"))
	// A fixed vector (printf %s idg_test_acme | sha256sum), so the stored format cannot drift.
	require.Equal(t, "35d886a34aea65e7659d9df125001c073711b1292749a99f481323d2ec15f972", hex.EncodeToString(tenancy.HashToken("idg_test_acme")))
	require.NotEqual(t, tenancy.HashToken("idg_test_acme"), tenancy.HashToken("idg_test_acmf"))
}

func TestBearerFromHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		header string
		want   string
		ok     bool
	}{
		{"Bearer idg_abc", "idg_abc", true},
		{"bearer idg_abc", "idg_abc", true},
		{"BEARER idg_abc", "idg_abc", true},
		{"Bearer   idg_abc", "idg_abc", true},
		{"", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer    ", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"Bearerx idg_abc", "", false},
		{"idg_abc", "", false},
		{"Bearer idg_abc extra", "", false},
		{"Bearer idg_abc\t", "", false},
		{"Bearer\tidg_abc", "", false},
	} {
		got, ok := tenancy.BearerFromHeader(tt.header)
		require.Equal(t, tt.ok, ok, "%q", tt.header)
		require.Equal(t, tt.want, got, "%q", tt.header)
	}
}

func TestScopes(t *testing.T) {
	t.Parallel()
	known := []string{"billing:refund", tenancy.ScopeOperationsRead, tenancy.ScopeOpsAdmin}
	require.NoError(t, tenancy.ValidateScopes([]string{"ops:admin", "billing:refund"}, known))
	require.ErrorContains(t, tenancy.ValidateScopes(nil, known), "at least one scope")
	require.ErrorContains(t, tenancy.ValidateScopes([]string{"billing:refund", "root"}, known), `unknown scope "root"`)
	require.ErrorContains(t, tenancy.ValidateScopes([]string{"ops:admin", "ops:admin"}, known), "listed twice")
	// Without a registry's list, only the shape is checked.
	require.NoError(t, tenancy.ValidateScopes([]string{"coupons:issue"}, nil))
	require.ErrorContains(t, tenancy.ValidateScopes([]string{"root"}, nil), "resource:action")
}

func TestWellFormed(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"idg_test_acme", "idg_abcd", "idg_" + strings.Repeat("A", 252)} {
		require.True(t, tokenspec.WellFormed(ok), ok)
	}
	for _, bad := range []string{"", "idg_", "idg_abc", "IDG_abcdef", "tok_abcdef", "idg_abc.def", "idg_abc def",
		"idg_" + strings.Repeat("A", 253), "idg_äbcdef"} {
		require.False(t, tokenspec.WellFormed(bad), bad)
	}
}
