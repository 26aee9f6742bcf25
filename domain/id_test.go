package domain_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
)

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "acme", "ord_9f2", "support-bot", "a.b:c-d_e", strings.Repeat("x", 64)} {
		require.True(t, domain.ValidID(ok), ok)
	}
	for _, bad := range []string{"", " ", "a b", "a/b", "ä", strings.Repeat("x", 65), "a\n"} {
		require.False(t, domain.ValidID(bad), bad)
	}
}
