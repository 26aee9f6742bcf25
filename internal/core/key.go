package core

import (
	"strings"
	"unicode/utf8"

	"github.com/idemgate/idemgate/internal/vocab"
)

// Limits on the length of an idempotency key, in characters.
const (
	// KeyMinLen is the shortest idempotency key accepted.
	KeyMinLen = 8
	// KeyMaxLen is the longest idempotency key accepted.
	KeyMaxLen = 128
)

// keyField is the Field named by every idempotency key error, whether the key
// came as an MCP argument or as the HTTP Idempotency-Key header.
const keyField = "idempotency_key"

// keyCharAllowed reports whether c may appear in an idempotency key:
// [A-Za-z0-9._:-].
func keyCharAllowed(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '-':
		return true
	}
	return false
}

// ValidateKey checks a client-supplied idempotency key: KeyMinLen to
// KeyMaxLen characters of [A-Za-z0-9._:-]. present says whether the client
// sent the key at all, so that a missing key and an empty one get distinct
// messages.
//
// It returns nil or a *domain.Error with Field "idempotency_key" and Code
// domain.CodeIdempotencyKeyRequired (missing, empty or whitespace-only) or
// domain.CodeInvalidIdempotencyKey (too short, too long, or a character
// outside the allowed set; the message names the first offending character
// and its 1-based position). Length is checked before characters, so a short
// key with a bad character is reported as too short.
func ValidateKey(key string, present bool) error {
	if !present {
		return vocab.Errorf(vocab.CodeIdempotencyKeyRequired, keyField,
			"idempotency_key is required for this tool")
	}
	if strings.TrimSpace(key) == "" {
		return vocab.Errorf(vocab.CodeIdempotencyKeyRequired, keyField,
			"idempotency_key is empty")
	}
	n := utf8.RuneCountInString(key)
	if n < KeyMinLen {
		return vocab.Errorf(vocab.CodeInvalidIdempotencyKey, keyField,
			"idempotency_key is too short (%d characters, minimum %d)", n, KeyMinLen)
	}
	if n > KeyMaxLen {
		return vocab.Errorf(vocab.CodeInvalidIdempotencyKey, keyField,
			"idempotency_key is too long (%d characters, maximum %d)", n, KeyMaxLen)
	}
	pos := 0
	for i := 0; i < len(key); {
		pos++
		if keyCharAllowed(key[i]) {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(key[i:])
		if r == utf8.RuneError && size <= 1 {
			return vocab.Errorf(vocab.CodeInvalidIdempotencyKey, keyField,
				"idempotency_key has an invalid UTF-8 byte 0x%02x at position %d (allowed: A-Z a-z 0-9 . _ : -)",
				key[i], pos)
		}
		return vocab.Errorf(vocab.CodeInvalidIdempotencyKey, keyField,
			"idempotency_key has an invalid character %q at position %d (allowed: A-Z a-z 0-9 . _ : -)",
			r, pos)
	}
	return nil
}

// ParseKeyHeader parses the value of the HTTP Idempotency-Key header, as the
// IETF Idempotency-Key header draft defines it, and validates the key with
// ValidateKey.
//
// The value is a structured-field string (RFC 8941 section 3.3.3): a
// double-quoted run of printable ASCII in which only \" and \\ are escapes.
// For convenience a bare, unquoted value is accepted too and taken as is.
// Leading and trailing spaces and tabs (HTTP optional whitespace) are
// ignored. Structured-field parameters after the closing quote are not
// supported and are refused.
//
// An empty header is domain.CodeIdempotencyKeyRequired; a malformed quoted
// string is domain.CodeInvalidIdempotencyKey; both name Field
// "idempotency_key".
func ParseKeyHeader(v string) (key string, err error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", vocab.Errorf(vocab.CodeIdempotencyKeyRequired, keyField,
			"the Idempotency-Key header is empty")
	}
	if v[0] != '"' {
		if err := ValidateKey(v, true); err != nil {
			return "", err
		}
		return v, nil
	}
	key, err = parseSFString(v)
	if err != nil {
		return "", err
	}
	if err := ValidateKey(key, true); err != nil {
		return "", err
	}
	return key, nil
}

// parseSFString decodes v, which starts with a double quote, as an RFC 8941
// sf-string that must make up the whole of v.
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			if i+1 >= len(v) {
				return "", invalidHeader("ends inside an escape")
			}
			i++
			if v[i] != '"' && v[i] != '\\' {
				return "", invalidHeader("has an invalid escape %q at byte %d (only \\\" and \\\\ are allowed)",
					v[i-1:i+1], i-1)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", invalidHeader("has data after the closing quote at byte %d", i+1)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", invalidHeader("has a non-printable or non-ASCII byte 0x%02x at byte %d", c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", invalidHeader("has no closing quote")
}

// invalidHeader returns the error for a malformed quoted Idempotency-Key
// header; format continues the sentence "the header ...".
func invalidHeader(format string, args ...any) *vocab.Error {
	return vocab.Errorf(vocab.CodeInvalidIdempotencyKey, keyField,
		"the Idempotency-Key header is not a valid structured-field string: it "+format, args...)
}
