package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

// argsSeeds are inputs worth starting every arguments fuzz target from.
var argsSeeds = []string{
	``,
	`{}`,
	`null`,
	`[]`,
	`"x"`,
	`{"order_id":"ord_9f2","amount_cents":5000,"reason":"duplicate","idempotency_key":"refund-ord_9f2-1"}`,
	`{"customer_id":"cus_1","amount_cents":1.0e3,"currency":"usd","memo":"goodwill"}`,
	` { "n" : 10e-1 , "m" : [ 1 , 2.50 , -0 , 0.1e1 , 1E+2 ] } `,
	`{"n":9007199254740992}`,
	`{"n":-9007199254740992}`,
	`{"n":9007199254740993}`,
	`{"n":9007199254740992.0000001}`,
	`{"n":1e300}`,
	`{"n":1e-400}`,
	`{"n":5e-324}`,
	`{"n":0.000001}`,
	`{"n":1e-7}`,
	`{"n":123456789012345678e-3}`,
	`{"s":"\u00e9\/\u003c\u2028\ud83d\ude00\u0000\b\f\n\r\t\"\\"}`,
	"{\"s\":\"é/<\u2028😀\x7f\"}",
	`{"s":"\ud800"}`,
	`{"s":"\udc00\ud800"}`,
	`{"s":"\\ud800"}`,
	"{\"s\":\"\xff\"}",
	"{\"s\":\"\xed\xa0\x80\"}",
	`{"a":1,"a":2}`,
	`{"a":1,"\u0061":2}`,
	`{"meta":{"x":1,"x":2}}`,
	`{"items":[{"sku":"a"},{"sku":"b","sku":"c"}]}`,
	`{"":{"":[{"":null}]}}`,
	`{"b":true,"a":false,"c":null,"d":[[],{}]}`,
	`{"\u20ac":1,"\ud83d\ude00":2,"\uffff":3,"a":4}`,
	`{"a":1}x`,
	`{} {}`,
	`{"a":1,}`,
	`{"a":01}`,
	nested(MaxArgsDepth),
	nested(MaxArgsDepth + 1),
	nestedArrays(MaxArgsDepth + 1),
}

// FuzzFingerprint checks, for every input DecodeArgs accepts, that
// fingerprinting cannot fail, that the hash survives re-encoding with other
// member order, whitespace, number spelling and string escapes, and that the
// canonical output decodes back to the same value.
func FuzzFingerprint(f *testing.F) {
	for _, s := range argsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		args, err := DecodeArgs(data)
		if err != nil {
			return
		}
		canonical, hash, err := Fingerprint(args, nil)
		require.NoError(t, err)
		require.Len(t, hash, 64)
		require.True(t, utf8.Valid(canonical))
		stored, err := CanonicalArgs(args)
		require.NoError(t, err)
		_, _, err = Fingerprint(args, []string{"reason", "memo", ""})
		require.NoError(t, err)

		// Independent check of the decode-encode-canonicalize pipeline: JCS
		// applied directly to the client's bytes gives the same canonical
		// form (when there is no idempotency_key member to drop).
		if _, hasKey := args[keyField]; !hasKey && len(data) > 0 {
			direct, err := jcs.Transform(data)
			require.NoError(t, err, "jcs refuses what DecodeArgs accepted")
			require.Equal(t, string(direct), string(canonical))
			require.Equal(t, string(stored), string(canonical))
		}

		// Re-encodings of the same value hash the same.
		indented, err := json.MarshalIndent(args, "", "  ")
		require.NoError(t, err)
		requireSameHash(t, hash, indented)
		var shuffled bytes.Buffer
		writeShuffled(&shuffled, args)
		requireSameHash(t, hash, shuffled.Bytes())
		require.Empty(t, DiffFields(args, mustDecodeUnlimited(t, shuffled.Bytes()), nil))

		// The canonical form decodes back, to the same value, and is a fixed
		// point of canonicalization.
		back := mustDecodeUnlimited(t, canonical)
		requireSameValue(t, withoutKey(args), back, "")
		again, hashAgain, err := Fingerprint(back, nil)
		require.NoError(t, err)
		require.Equal(t, string(canonical), string(again))
		require.Equal(t, hash, hashAgain)
		if len(canonical) <= MaxArgsBytes {
			fromStored, err := DecodeArgs(canonical)
			require.NoError(t, err, "DecodeArgs refuses canonical output %q", canonical)
			require.Empty(t, DiffFields(args, fromStored, nil))
		}
	})
}

// requireSameHash decodes raw (skipping it if it grew past the size limit)
// and requires its fingerprint to be want.
func requireSameHash(t *testing.T, want string, raw []byte) {
	t.Helper()
	if len(raw) > MaxArgsBytes {
		return
	}
	args, err := DecodeArgs(raw)
	require.NoError(t, err, "re-encoded input refused: %q", raw)
	_, got, err := Fingerprint(args, nil)
	require.NoError(t, err)
	require.Equal(t, want, got, "re-encoded input: %q", raw)
}

// mustDecodeUnlimited decodes a JSON object with encoding/json and UseNumber,
// without DecodeArgs's size limit.
func mustDecodeUnlimited(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m), "decoding %q", raw)
	require.NotNil(t, m)
	return m
}

// withoutKey returns a shallow copy of args without "idempotency_key".
func withoutKey(args map[string]any) map[string]any {
	out := make(map[string]any, len(args))
	for k, v := range args {
		if k != keyField {
			out[k] = v
		}
	}
	return out
}

// requireSameValue requires a and b to be the same JSON value, numbers
// compared as the doubles they denote.
func requireSameValue(t *testing.T, a, b any, path string) {
	t.Helper()
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		require.True(t, ok, "%s: %T vs %T", path, a, b)
		require.Len(t, bv, len(av), path)
		for k, v := range av {
			w, ok := bv[k]
			require.True(t, ok, "%s: member %q lost", path, k)
			requireSameValue(t, v, w, path+"."+k)
		}
	case []any:
		bv, ok := b.([]any)
		require.True(t, ok, "%s: %T vs %T", path, a, b)
		require.Len(t, bv, len(av), path)
		for i := range av {
			requireSameValue(t, av[i], bv[i], fmt.Sprintf("%s[%d]", path, i))
		}
	case json.Number:
		bv, ok := b.(json.Number)
		require.True(t, ok, "%s: %T vs %T", path, a, b)
		af, err := strconv.ParseFloat(string(av), 64)
		require.NoError(t, err)
		bf, err := strconv.ParseFloat(string(bv), 64)
		require.NoError(t, err)
		require.Equal(t, af == 0, bf == 0, path)
		if af != 0 {
			require.Equal(t, af, bf, "%s: %s vs %s", path, av, bv)
		}
	default:
		require.Equal(t, a, b, path)
	}
}

// writeShuffled writes v as JSON unlike encoding/json would: members in
// reverse order, odd whitespace, every string character as a \u escape (and
// '/' as "\/"), and numbers with a redundant exponent or trailing zero.
func writeShuffled(buf *bytes.Buffer, v any) {
	switch v := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		slices.Sort(names)
		slices.Reverse(names)
		buf.WriteString("{\n")
		for i, name := range names {
			if i > 0 {
				buf.WriteString(" ,\t")
			}
			writeEscaped(buf, name)
			buf.WriteString(" : ")
			writeShuffled(buf, v[name])
		}
		buf.WriteString("\r\n}")
	case []any:
		buf.WriteString("[ ")
		for i, e := range v {
			if i > 0 {
				buf.WriteString(",\n")
			}
			writeShuffled(buf, e)
		}
		buf.WriteString(" ]")
	case string:
		writeEscaped(buf, v)
	case json.Number:
		s := string(v)
		switch {
		case strings.ContainsAny(s, "eE"):
			buf.WriteString(s)
		case strings.Contains(s, "."):
			buf.WriteString(s + "0")
		default:
			buf.WriteString(s + "E+00")
		}
	default:
		b, _ := json.Marshal(v)
		buf.Write(b)
	}
}

// writeEscaped writes s as a JSON string with every character escaped.
func writeEscaped(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '/':
			buf.WriteString(`\/`)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(buf, `\u%04x\u%04X`, hi, lo)
		default:
			fmt.Fprintf(buf, `\u%04x`, r)
		}
	}
	buf.WriteByte('"')
}

// FuzzDecodeArgs checks that DecodeArgs never panics, refuses only with
// invalid_argument errors whose text is valid UTF-8, and accepts only JSON
// objects.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range argsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		args, err := DecodeArgs(data)
		if err != nil {
			var derr *vocab.Error
			require.True(t, errors.As(err, &derr), "%T: %v", err, err)
			if derr.Code == vocab.CodeInvalidIdempotencyKey {
				require.Equal(t, "idempotency_key", derr.Field, "%v", err)
			} else {
				require.Equal(t, vocab.CodeInvalidArgument, derr.Code, "%v", err)
			}
			require.NotEmpty(t, derr.Field)
			require.True(t, utf8.ValidString(err.Error()), "%q", err.Error())
			require.Nil(t, args)
			return
		}
		require.NotNil(t, args)
		if len(data) > 0 {
			require.True(t, json.Valid(data), "accepted invalid JSON %q", data)
			require.True(t, utf8.Valid(data), "accepted invalid UTF-8 %q", data)
		}
		_, err = json.Marshal(args)
		require.NoError(t, err)
	})
}

// keyPattern is the contract's definition of a valid idempotency key.
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{8,128}$`)

// requireKeyError requires err to be an idempotency key error.
func requireKeyError(t *testing.T, err error) {
	t.Helper()
	var derr *vocab.Error
	require.True(t, errors.As(err, &derr), "%T: %v", err, err)
	require.Contains(t, []vocab.Code{vocab.CodeIdempotencyKeyRequired, vocab.CodeInvalidIdempotencyKey}, derr.Code)
	require.Equal(t, "idempotency_key", derr.Field)
}

// FuzzValidateKey checks that ValidateKey accepts exactly the keys the
// contract's pattern describes.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{
		"", " ", "\t\n", "abcdefg", "abcdefgh", "a.b_c:d-e", strings.Repeat("k", 128),
		strings.Repeat("k", 129), "abcd/efgh", "abcd efgh", "ééééééééé", "abcdefg\xff",
		"abcdefg\x00", "8e03978e-40d5-43e8-bc93-6894a57f9324", "\u00a0\u00a0\u00a0\u00a0\u00a0\u00a0\u00a0\u00a0",
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, key string, present bool) {
		err := ValidateKey(key, present)
		if err == nil {
			require.True(t, present)
			require.True(t, keyPattern.MatchString(key), "accepted %q", key)
			return
		}
		requireKeyError(t, err)
		require.False(t, present && keyPattern.MatchString(key), "refused valid key %q: %v", key, err)
	})
}

// FuzzParseKeyHeader checks that ParseKeyHeader only returns valid keys, and
// accepts every valid key both bare and quoted.
func FuzzParseKeyHeader(f *testing.F) {
	for _, s := range []string{
		"", " ", `""`, `"`, `"abcdefgh"`, "abcdefgh", ` "abcdefgh" `, `"abcd\"efgh"`, `"abcd\\efgh"`,
		`"abcd\nefgh"`, `"abcdefgh\`, `"abcdefgh";a=1`, `"abcdefgh"x`, `abcd"efgh`, "\"abcd\x7fefgh\"",
		"\"abcdéfgh\"", `"` + strings.Repeat("k", 129) + `"`, "\tabcdefgh\t",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := ParseKeyHeader(header)
		if err != nil {
			requireKeyError(t, err)
			require.Empty(t, key)
			trimmed := strings.Trim(header, " \t")
			require.False(t, keyPattern.MatchString(trimmed), "refused bare valid key %q: %v", header, err)
			return
		}
		require.True(t, keyPattern.MatchString(key), "accepted %q from %q", key, header)
		again, err := ParseKeyHeader(`"` + key + `"`)
		require.NoError(t, err)
		require.Equal(t, key, again)
	})
}
