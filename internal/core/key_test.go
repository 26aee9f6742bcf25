package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

// requireDomainError asserts err is a *domain.Error with code and field and
// a message containing msgPart, and returns it.
func requireDomainError(t *testing.T, err error, code vocab.Code, field, msgPart string) *vocab.Error {
	t.Helper()
	require.Error(t, err)
	var derr *vocab.Error
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
			code    vocab.Code
			msgPart string
		}{
			{"Missing", "", false, vocab.CodeIdempotencyKeyRequired, "required"},
			{"MissingIgnoresValue", "abcdefgh", false, vocab.CodeIdempotencyKeyRequired, "required"},
			{"Empty", "", true, vocab.CodeIdempotencyKeyRequired, "empty"},
			{"WhitespaceOnly", " \t\n ", true, vocab.CodeIdempotencyKeyRequired, "empty"},
			{"LongWhitespaceOnly", strings.Repeat(" ", 20), true, vocab.CodeIdempotencyKeyRequired, "empty"},
			{"OneShort", "abcdefg", true, vocab.CodeInvalidIdempotencyKey, "too short (7 characters, minimum 8)"},
			{"OneChar", "a", true, vocab.CodeInvalidIdempotencyKey, "too short (1 characters, minimum 8)"},
			{"ShortWithBadChar", "ab/c", true, vocab.CodeInvalidIdempotencyKey, "too short (4 characters"},
			{"ShortCountsRunes", "ééééééé", true, vocab.CodeInvalidIdempotencyKey, "too short (7 characters"},
			{"OneLong", strings.Repeat("k", KeyMaxLen+1), true, vocab.CodeInvalidIdempotencyKey, "too long (129 characters, maximum 128)"},
			{"VeryLong", strings.Repeat("k", 10000), true, vocab.CodeInvalidIdempotencyKey, "too long"},
			{"Slash", "abcd/efgh", true, vocab.CodeInvalidIdempotencyKey, `invalid character '/' at position 5`},
			{"Space", "abcd efgh", true, vocab.CodeInvalidIdempotencyKey, `invalid character ' ' at position 5`},
			{"LeadingSpace", " abcdefgh", true, vocab.CodeInvalidIdempotencyKey, `invalid character ' ' at position 1`},
			{"TrailingNewline", "abcdefgh\n", true, vocab.CodeInvalidIdempotencyKey, `invalid character '\n' at position 9`},
			{"Quote", `abcdefg"`, true, vocab.CodeInvalidIdempotencyKey, `invalid character '"' at position 8`},
			{"Plus", "abc+defgh", true, vocab.CodeInvalidIdempotencyKey, `invalid character '+' at position 4`},
			{"NUL", "abcdefg\x00", true, vocab.CodeInvalidIdempotencyKey, `invalid character '\x00' at position 8`},
			{"NonASCIIPositionInCharacters", "ééabcdefgh", true, vocab.CodeInvalidIdempotencyKey, `invalid character 'é' at position 1`},
			{"NonASCIIAfterASCII", "abcdefgé", true, vocab.CodeInvalidIdempotencyKey, `invalid character 'é' at position 8`},
			{"FirstOffenderNamed", "abcd/e+fgh", true, vocab.CodeInvalidIdempotencyKey, `'/' at position 5`},
			{"InvalidUTF8", "abcdefg\xff", true, vocab.CodeInvalidIdempotencyKey, "invalid UTF-8 byte 0xff at position 8"},
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
			code    vocab.Code
			msgPart string
		}{
			{"Empty", "", vocab.CodeIdempotencyKeyRequired, "header is empty"},
			{"OnlyOWS", " \t ", vocab.CodeIdempotencyKeyRequired, "header is empty"},
			{"EmptyQuoted", `""`, vocab.CodeIdempotencyKeyRequired, "empty"},
			{"QuotedSpaces", `"   "`, vocab.CodeIdempotencyKeyRequired, "empty"},
			{"Unterminated", `"abcdefgh`, vocab.CodeInvalidIdempotencyKey, "no closing quote"},
			{"LoneQuote", `"`, vocab.CodeInvalidIdempotencyKey, "no closing quote"},
			{"BadEscape", `"abcd\nefgh"`, vocab.CodeInvalidIdempotencyKey, `invalid escape "\\n" at byte 5`},
			{"BadEscapeSlash", `"abcd\/efgh"`, vocab.CodeInvalidIdempotencyKey, "invalid escape"},
			{"TrailingBackslash", `"abcdefgh\`, vocab.CodeInvalidIdempotencyKey, "ends inside an escape"},
			{"EscapedQuoteIsNotAKeyChar", `"abcd\"efgh"`, vocab.CodeInvalidIdempotencyKey, `invalid character '"' at position 5`},
			{"EscapedBackslashIsNotAKeyChar", `"abcd\\efgh"`, vocab.CodeInvalidIdempotencyKey, `invalid character '\\' at position 5`},
			{"DataAfterQuote", `"abcdefgh"x`, vocab.CodeInvalidIdempotencyKey, "data after the closing quote"},
			{"Parameters", `"abcdefgh";v=1`, vocab.CodeInvalidIdempotencyKey, "data after the closing quote"},
			{"ControlByteInQuotes", "\"abcd\x01efgh\"", vocab.CodeInvalidIdempotencyKey, "byte 0x01"},
			{"NonASCIIInQuotes", `"abcdéfgh"`, vocab.CodeInvalidIdempotencyKey, "non-ASCII byte 0xc3"},
			{"QuotedTooShort", `"abc"`, vocab.CodeInvalidIdempotencyKey, "too short (3 characters"},
			{"QuotedTooLong", `"` + strings.Repeat("k", KeyMaxLen+1) + `"`, vocab.CodeInvalidIdempotencyKey, "too long"},
			{"BareTooShort", "abc", vocab.CodeInvalidIdempotencyKey, "too short"},
			{"BareBadChar", "abcd efgh", vocab.CodeInvalidIdempotencyKey, `invalid character ' '`},
			{"BareInnerQuote", `abcd"efgh`, vocab.CodeInvalidIdempotencyKey, `invalid character '"'`},
			{"BareTrailingQuote", `abcdefgh"`, vocab.CodeInvalidIdempotencyKey, `invalid character '"'`},
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
