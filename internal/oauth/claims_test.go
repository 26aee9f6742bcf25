package oauth

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

func TestParseScopes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string // "" means absent
		want []string
		ok   bool
	}{
		{"Absent", "", nil, true},
		{"Null", `null`, nil, true},
		{"String", `"a b:c"`, []string{"a", "b:c"}, true},
		{"StringSpaces", `"  a   b "`, []string{"a", "b"}, true},
		{"EmptyString", `""`, nil, true},
		{"Array", `["a","b"]`, []string{"a", "b"}, true},
		{"Duplicates", `["a","b","a"]`, []string{"a", "b"}, true},
		{"ArrayWithSpace", `["a b"]`, nil, false},
		{"Tab", `"a\tb"`, nil, false},
		{"Quote", `"a\"b"`, nil, false},
		{"NonASCII", `"caf\u00e9"`, nil, false},
		{"Number", `1`, nil, false},
		{"ArrayOfNumbers", `[1]`, nil, false},
		{"Object", `{}`, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var raw json.RawMessage
			if tt.raw != "" {
				raw = json.RawMessage(tt.raw)
			}
			got, err := parseScopes(raw)
			if !tt.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestActorFromClaims(t *testing.T) {
	t.Parallel()
	names := claimNames{tenant: "tenant", user: "sub", scopes: "scope"}
	tests := []struct {
		name   string
		claims string
		want   vocab.Actor
		reason Reason // "" means accepted
	}{
		{"Full", `{"tenant":"acme","sub":"u1","scope":"a b","jti":"j-1"}`,
			vocab.Actor{TenantID: "acme", UserID: "u1", TokenID: "j-1", Scopes: []string{"a", "b"}}, ""},
		{"JTINotAnID", `{"tenant":"acme","sub":"u1","jti":"a b"}`, vocab.Actor{TenantID: "acme", UserID: "u1"}, ""},
		{"EmptySubject", `{"tenant":"acme","sub":""}`, vocab.Actor{}, ReasonUser},
		{"NoSubject", `{"tenant":"acme"}`, vocab.Actor{}, ReasonUser},
		{"EmptyTenant", `{"tenant":"","sub":"u1"}`, vocab.Actor{}, ReasonTenant},
		{"TenantNull", `{"tenant":null,"sub":"u1"}`, vocab.Actor{}, ReasonTenant},
		{"TenantArray", `{"tenant":["acme"],"sub":"u1"}`, vocab.Actor{}, ReasonTenant},
		{"IdentityProviderIDs", `{"tenant":"org_2b9f@example.com","sub":"auth0|64f1c2","scope":"a"}`,
			vocab.Actor{TenantID: "org_2b9f@example.com", UserID: "auth0|64f1c2", Scopes: []string{"a"}}, ""},
		{"LongUnicodeIDs", `{"tenant":"` + strings.Repeat("t", 74) + `","sub":"Zoë Åström"}`,
			vocab.Actor{TenantID: strings.Repeat("t", 74), UserID: "Zoë Åström"}, ""},
		{"TenantControl", `{"tenant":"acme\u0007","sub":"u1"}`, vocab.Actor{}, ReasonTenant},
		{"UserLineSeparator", `{"tenant":"acme","sub":"u\u2028"}`, vocab.Actor{}, ReasonUser},
		{"UserTooLong", `{"tenant":"acme","sub":"` + strings.Repeat("u", 256) + `"}`, vocab.Actor{}, ReasonUser},
		{"BadScopes", `{"tenant":"acme","sub":"u1","scope":{}}`, vocab.Actor{}, ReasonScope},
		{"NotAnObject", `[]`, vocab.Actor{}, ReasonMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, terr := actorFromClaims([]byte(tt.claims), names)
			if tt.reason != "" {
				require.NotNil(t, terr)
				require.Equal(t, tt.reason, terr.Reason)
				switch tt.name {
				case "TenantControl", "UserLineSeparator", "UserTooLong", "EmptyTenant", "EmptySubject":
					var ie *vocab.IdentityError
					require.ErrorAs(t, terr, &ie, "the refusal carries the id rule's reason")
					require.NotContains(t, terr.Detail, "acme\a")
				}
				return
			}
			require.Nil(t, terr)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestCheckRegistered(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	const iss, aud = "https://auth.example.com", "https://api.example.com"
	tests := []struct {
		name   string
		claims string
		reason Reason // "" means it passes
	}{
		{"OK", `{"iss":"https://auth.example.com","aud":"https://api.example.com","exp":1800000060}`, ""},
		{"AudArray", `{"iss":"https://auth.example.com","aud":["x","https://api.example.com"],"exp":1800000060}`, ""},
		{"FractionalExp", `{"iss":"https://auth.example.com","aud":"https://api.example.com","exp":1800000000.5}`, ""},
		{"ExpNow", `{"iss":"https://auth.example.com","aud":"https://api.example.com","exp":1800000000}`, ReasonExpired},
		{"NoExp", `{"iss":"https://auth.example.com","aud":"https://api.example.com"}`, ReasonExpired},
		{"ExpString", `{"iss":"https://auth.example.com","aud":"https://api.example.com","exp":"soon"}`, ReasonMalformed},
		{"NbfWithinLeeway", `{"iss":"https://auth.example.com","aud":"https://api.example.com","exp":1800000600,"nbf":1800000200}`, ""},
		{"NbfFuture", `{"iss":"https://auth.example.com","aud":"https://api.example.com","exp":1800009000,"nbf":1800000400}`, ReasonNotYet},
		{"IssuerSlash", `{"iss":"https://auth.example.com/","aud":"https://api.example.com","exp":1800000060}`, ReasonIssuer},
		{"NoAud", `{"iss":"https://auth.example.com","exp":1800000060}`, ReasonAudience},
		{"AudNumber", `{"iss":"https://auth.example.com","aud":1,"exp":1800000060}`, ReasonMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			terr := checkRegistered([]byte(tt.claims), iss, aud, now)
			if tt.reason == "" {
				require.Nil(t, terr)
				return
			}
			require.NotNil(t, terr)
			require.Equal(t, tt.reason, terr.Reason)
		})
	}
}

func TestAcceptedType(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]bool{
		"": true, "JWT": true, "jwt": true, "at+jwt": true, "application/at+JWT": true,
		"id_token+jwt": false, "dpop+jwt": false, "logout+jwt": false, "JOSE": false,
	} {
		require.Equal(t, want, acceptedType(typ), typ)
	}
}

// FuzzParseScopes: any claim value either parses to distinct RFC 6749
// scope-tokens or is refused; never a panic.
func FuzzParseScopes(f *testing.F) {
	for _, seed := range []string{`"a b"`, `["a","b"]`, `null`, `""`, `[""]`, `"a  a"`, `1`, `{"a":1}`, `["\u0000"]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := parseScopes(raw)
		if err != nil {
			require.Nil(t, got)
			return
		}
		seen := map[string]bool{}
		for _, s := range got {
			require.True(t, validScope(s), "%q", s)
			require.False(t, seen[s], "duplicate %q", s)
			seen[s] = true
		}
		// A space-joined string of the result parses to the same scopes.
		again, err := parseScopes(mustJSON(t, strings.Join(got, " ")))
		require.NoError(t, err)
		require.Equal(t, got, again)
	})
}

// FuzzAuthenticateClaims runs the claim parsing that happens before and
// after the signature on arbitrary headers and payloads: no panic, and an
// actor only with valid ids.
func FuzzAuthenticateClaims(f *testing.F) {
	f.Add([]byte(`{"alg":"RS256","typ":"at+jwt"}`), []byte(`{"iss":"i","aud":"a","exp":1e10,"tenant":"t","sub":"s","scope":"x y"}`))
	f.Add([]byte(`{"alg":"none"}`), []byte(`{"aud":["a"],"exp":-1,"nbf":1e300}`))
	f.Add([]byte(`[]`), []byte(`{"tenant":["t"],"sub":1,"scope":["x"]}`))
	names := claimNames{tenant: "tenant", user: "sub", scopes: "scope"}
	f.Fuzz(func(t *testing.T, header, payload []byte) {
		enc := base64.RawURLEncoding.EncodeToString
		h, p, terr := split(enc(header) + "." + enc(payload) + ".sig")
		if terr == nil {
			require.True(t, slices.Contains(signingAlgs, h.Alg))
			require.Equal(t, payload, p)
			_ = checkRegistered(p, "i", "a", time.Unix(0, 0))
		}
		actor, terr := actorFromClaims(payload, names)
		if terr == nil {
			require.True(t, vocab.ValidID(actor.TenantID))
			require.True(t, vocab.ValidID(actor.UserID))
			require.True(t, actor.TokenID == "" || vocab.ValidID(actor.TokenID))
		} else {
			require.NotEmpty(t, terr.Reason)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
