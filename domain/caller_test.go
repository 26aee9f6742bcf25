package domain_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/domain"
)

func TestCheckID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		"a", "acme", "auth0|64f1c2", "ann@example.com", "google-oauth2|1234567890",
		"Zoë Åström", "用户42", "CN=Ann,O=Acme", strings.Repeat("x", 74), strings.Repeat("x", 255),
		strings.Repeat("é", 127), // 254 bytes
	} {
		if err := domain.CheckID(ok); err != nil {
			t.Errorf("CheckID(%q) = %v, want nil", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"":                       "empty",
		strings.Repeat("x", 256): "256 bytes",
		strings.Repeat("é", 128): "256 bytes",
		"a\x00b":                 "U+0000",
		"a\nb":                   "U+000A",
		"a\tb":                   "U+0009",
		"a\u2028b":               "U+2028",
		"a\u00a0b":               "U+00A0",
		"a\u200bb":               "U+200B",
		"\ufeffacme":             "U+FEFF",
		"a\x7f":                  "U+007F",
		"a\xffb":                 "UTF-8",
		" acme":                  "space",
		"acme ":                  "space",
	} {
		err := domain.CheckID(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckID(%q) = %v, want an error saying %q", bad, err, want)
		}
	}
}

// FuzzCheckID: CheckID accepts exactly the ids of its rule, and its error
// never quotes the id.
func FuzzCheckID(f *testing.F) {
	for _, s := range []string{"acme", "auth0|64f1c2", "ann@example.com", strings.Repeat("x", 74), "Zoë", "", " a", "a ",
		"a\x00", "a\n", "\u2028", "\xff", strings.Repeat("x", 256), "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := s != "" && len(s) <= 255 && utf8.ValidString(s) && s[0] != ' ' && s[len(s)-1] != ' '
		for _, r := range s {
			want = want && unicode.IsPrint(r)
		}
		err := domain.CheckID(s)
		if (err == nil) != want {
			t.Fatalf("CheckID(%q) = %v, want ok=%v", s, err, want)
		}
		if err != nil && len(s) > 3 && strings.Contains(err.Error(), s) {
			t.Fatalf("CheckID(%q)'s error quotes the id: %v", s, err)
		}
	})
}

func TestCallerContext(t *testing.T) {
	t.Parallel()
	if _, ok := domain.CallerFromContext(t.Context()); ok {
		t.Fatal("a caller in a bare context")
	}
	c := domain.Caller{TenantID: "acme", UserID: "auth0|64f1c2", Scopes: []string{domain.ScopeOperationsRead}}
	got, ok := domain.CallerFromContext(domain.ContextWithCaller(t.Context(), c))
	if !ok || got.TenantID != c.TenantID || got.UserID != c.UserID || len(got.Scopes) != 1 {
		t.Fatalf("CallerFromContext = %+v, %v", got, ok)
	}
}
