package api

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestAuditTextIsStorable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
		n              int
	}{
		{"Plain", "refund-key-01", "refund-key-01", 256},
		{"NUL", "a\x00b", "a\uFFFDb", 256},
		{"InvalidUTF8", "a\xffb", "a\uFFFDb", 256},
		{"CutAtRuneBoundary", strings.Repeat("€", 128), strings.Repeat("€", 85), 256},
		{"CutASCII", strings.Repeat("k", 300), strings.Repeat("k", 256), 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := auditText(tc.in, tc.n)
			require.Equal(t, tc.want, got)
			require.True(t, utf8.ValidString(got))
			require.NotContains(t, got, "\x00")
			require.LessOrEqual(t, len(got), tc.n)
		})
	}
}
