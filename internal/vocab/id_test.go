package vocab_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "acme", "ord_9f2", "support-bot", "a.b:c-d_e", strings.Repeat("x", 64)} {
		require.True(t, vocab.ValidID(ok), ok)
	}
	for _, bad := range []string{"", " ", "a b", "a/b", "ä", strings.Repeat("x", 65), "a\n"} {
		require.False(t, vocab.ValidID(bad), bad)
	}
}

func TestCheckLinkBase(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"http://127.0.0.1:8080/reset-password", "https://app.example.com/reset?lang=en",
		"http://[::1]:8080/r", "HTTPS://Example.com"} {
		require.NoError(t, vocab.CheckLinkBase(ok), ok)
	}
	for bad, want := range map[string]string{
		"":                                "not an absolute",
		"/reset":                          "not an absolute",
		"ftp://example.com/r":             "not an absolute",
		"http:///reset":                   "no host",
		"http:example.com":                "no host",
		"https://u:p@example.com/r":       "credentials",
		"https://example.com/r#x":         "fragment",
		"https://example.com/r?token=abc": "token parameter",
		"http://0.0.0.0:8080/r":           "0.0.0.0",
		"http://[::]:8080/r":              "::",
		"http://exa mple.com/":            "not a URL",
		"https://example.com/" + strings.Repeat("x", vocab.MaxLinkBaseLen): "longer",
	} {
		err := vocab.CheckLinkBase(bad)
		require.ErrorContains(t, err, want, bad)
	}
}
