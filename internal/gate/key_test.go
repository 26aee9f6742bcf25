package gate

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/domain"
)

// requireDomainError asserts err is a *domain.Error with code and field and
// a message containing msgPart, and returns it.
func requireDomainError(t *testing.T, err error, code domain.Code, field, msgPart string) *domain.Error {
	t.Helper()
	require.Error(t, err)
	var derr *domain.Error
	require.True(t, errors.As(err, &derr), "error %v (%T) is not a *domain.Error", err, err)
	require.Equal(t, code, derr.Code, "error: %v", err)
	require.Equal(t, field, derr.Field, "error: %v", err)
	require.Contains(t, derr.Message, msgPart)
	return derr
}

func TestValidateKey(t *testing.T) {
	t.Parallel()

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			name string
			key  string
		}{
			{"ExactlyMin", "abcdefgh"},
			{"ExactlyMax", strings.Repeat("k", KeyMaxLen)},
			{"AllPunctuation", "a.b_c:d-e"},
			{"OnlyPunctuation", "._:-._:-"},
			{"Digits", "12345678"},
			{"UUID", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
			{"MixedCase", "Refund:ORD_9f2.v1-A"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				require.NoError(t, ValidateKey(tt.key, true))
			})
		}
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			name    string
			key     string
			present bool
			code    domain.Code
			msgPart string
		}{
			{"Missing", "", false, domain.CodeIdempotencyKeyRequired, "required"},
			{"MissingIgnoresValue", "abcdefgh", false, domain.CodeIdempotencyKeyRequired, "required"},
			{"Empty", "", true, domain.CodeIdempotencyKeyRequired, "empty"},
			{"WhitespaceOnly", " \t\n ", true, domain.CodeIdempotencyKeyRequired, "empty"},
			{"LongWhitespaceOnly", strings.Repeat(" ", 20), true, domain.CodeIdempotencyKeyRequired, "empty"},
			{"OneShort", "abcdefg", true, domain.CodeInvalidIdempotencyKey, "too short (7 characters, minimum 8)"},
			{"OneChar", "a", true, domain.CodeInvalidIdempotencyKey, "too short (1 characters, minimum 8)"},
			{"ShortWithBadChar", "ab/c", true, domain.CodeInvalidIdempotencyKey, "too short (4 characters"},
			{"ShortCountsRunes", "ééééééé", true, domain.CodeInvalidIdempotencyKey, "too short (7 characters"},
			{"OneLong", strings.Repeat("k", KeyMaxLen+1), true, domain.CodeInvalidIdempotencyKey, "too long (129 characters, maximum 128)"},
			{"VeryLong", strings.Repeat("k", 10000), true, domain.CodeInvalidIdempotencyKey, "too long"},
			{"Slash", "abcd/efgh", true, domain.CodeInvalidIdempotencyKey, `invalid character '/' at position 5`},
			{"Space", "abcd efgh", true, domain.CodeInvalidIdempotencyKey, `invalid character ' ' at position 5`},
			{"LeadingSpace", " abcdefgh", true, domain.CodeInvalidIdempotencyKey, `invalid character ' ' at position 1`},
			{"TrailingNewline", "abcdefgh\n", true, domain.CodeInvalidIdempotencyKey, `invalid character '\n' at position 9`},
			{"Quote", `abcdefg"`, true, domain.CodeInvalidIdempotencyKey, `invalid character '"' at position 8`},
			{"Plus", "abc+defgh", true, domain.CodeInvalidIdempotencyKey, `invalid character '+' at position 4`},
			{"NUL", "abcdefg\x00", true, domain.CodeInvalidIdempotencyKey, `invalid character '\x00' at position 8`},
			{"NonASCIIPositionInCharacters", "ééabcdefgh", true, domain.CodeInvalidIdempotencyKey, `invalid character 'é' at position 1`},
			{"NonASCIIAfterASCII", "abcdefgé", true, domain.CodeInvalidIdempotencyKey, `invalid character 'é' at position 8`},
			{"FirstOffenderNamed", "abcd/e+fgh", true, domain.CodeInvalidIdempotencyKey, `'/' at position 5`},
			{"InvalidUTF8", "abcdefg\xff", true, domain.CodeInvalidIdempotencyKey, "invalid UTF-8 byte 0xff at position 8"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				err := ValidateKey(tt.key, tt.present)
				requireDomainError(t, err, tt.code, "idempotency_key", tt.msgPart)
			})
		}
	})
}

func TestParseKeyHeader(t *testing.T) {
	t.Parallel()

	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			name   string
			header string
			want   string
		}{
			{"Quoted", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
			{"Bare", "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
			{"QuotedWithOWS", " \t\"abcdefgh\" ", "abcdefgh"},
			{"BareWithOWS", "  abcdefgh\t", "abcdefgh"},
			{"QuotedPunctuation", `"a.b_c:d-e"`, "a.b_c:d-e"},
			{"QuotedMax", `"` + strings.Repeat("k", KeyMaxLen) + `"`, strings.Repeat("k", KeyMaxLen)},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				key, err := ParseKeyHeader(tt.header)
				require.NoError(t, err)
				require.Equal(t, tt.want, key)
			})
		}
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			name    string
			header  string
			code    domain.Code
			msgPart string
		}{
			{"Empty", "", domain.CodeIdempotencyKeyRequired, "header is empty"},
			{"OnlyOWS", " \t ", domain.CodeIdempotencyKeyRequired, "header is empty"},
			{"EmptyQuoted", `""`, domain.CodeIdempotencyKeyRequired, "empty"},
			{"QuotedSpaces", `"   "`, domain.CodeIdempotencyKeyRequired, "empty"},
			{"Unterminated", `"abcdefgh`, domain.CodeInvalidIdempotencyKey, "no closing quote"},
			{"LoneQuote", `"`, domain.CodeInvalidIdempotencyKey, "no closing quote"},
			{"BadEscape", `"abcd\nefgh"`, domain.CodeInvalidIdempotencyKey, `invalid escape "\\n" at byte 5`},
			{"BadEscapeSlash", `"abcd\/efgh"`, domain.CodeInvalidIdempotencyKey, "invalid escape"},
			{"TrailingBackslash", `"abcdefgh\`, domain.CodeInvalidIdempotencyKey, "ends inside an escape"},
			{"EscapedQuoteIsNotAKeyChar", `"abcd\"efgh"`, domain.CodeInvalidIdempotencyKey, `invalid character '"' at position 5`},
			{"EscapedBackslashIsNotAKeyChar", `"abcd\\efgh"`, domain.CodeInvalidIdempotencyKey, `invalid character '\\' at position 5`},
			{"DataAfterQuote", `"abcdefgh"x`, domain.CodeInvalidIdempotencyKey, "data after the closing quote"},
			{"Parameters", `"abcdefgh";v=1`, domain.CodeInvalidIdempotencyKey, "data after the closing quote"},
			{"ControlByteInQuotes", "\"abcd\x01efgh\"", domain.CodeInvalidIdempotencyKey, "byte 0x01"},
			{"NonASCIIInQuotes", `"abcdéfgh"`, domain.CodeInvalidIdempotencyKey, "non-ASCII byte 0xc3"},
			{"QuotedTooShort", `"abc"`, domain.CodeInvalidIdempotencyKey, "too short (3 characters"},
			{"QuotedTooLong", `"` + strings.Repeat("k", KeyMaxLen+1) + `"`, domain.CodeInvalidIdempotencyKey, "too long"},
			{"BareTooShort", "abc", domain.CodeInvalidIdempotencyKey, "too short"},
			{"BareBadChar", "abcd efgh", domain.CodeInvalidIdempotencyKey, `invalid character ' '`},
			{"BareInnerQuote", `abcd"efgh`, domain.CodeInvalidIdempotencyKey, `invalid character '"'`},
			{"BareTrailingQuote", `abcdefgh"`, domain.CodeInvalidIdempotencyKey, `invalid character '"'`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				key, err := ParseKeyHeader(tt.header)
				requireDomainError(t, err, tt.code, "idempotency_key", tt.msgPart)
				require.Empty(t, key)
			})
		}
	})
}
