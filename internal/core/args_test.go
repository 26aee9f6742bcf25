package core

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

// hashOf decodes raw with DecodeArgs and fingerprints it, failing the test on
// any error.
func hashOf(t *testing.T, raw string, exclude []string) (canonical string, hash string) {
	t.Helper()
	args, err := DecodeArgs([]byte(raw))
	require.NoError(t, err, "DecodeArgs(%s)", raw)
	c, h, err := Fingerprint(args, exclude)
	require.NoError(t, err, "Fingerprint(%s)", raw)
	return string(c), h
}

// nested returns an object nested depth levels deep (the top level counts as
// 1), with the innermost level holding a number.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `{"n":1}` + strings.Repeat(`}`, depth-1)
}

// nestedArrays returns an object whose member holds arrays so that the total
// depth is depth.
func nestedArrays(depth int) string {
	return `{"a":` + strings.Repeat(`[`, depth-1) + strings.Repeat(`]`, depth-1) + `}`
}

func TestFingerprintEqual(t *testing.T) {
	t.Parallel()

	refund := []string{"reason"}
	for _, tt := range []struct {
		name    string
		a, b    string
		exclude []string
	}{
		{"MemberOrder", `{"order_id":"ord_9f2","amount_cents":5000}`, `{"amount_cents":5000,"order_id":"ord_9f2"}`, nil},
		{"Whitespace", `{"a":1,"b":[1,2]}`, " \n\t{ \"a\" :\n1 ,\r\n\"b\" : [ 1 , 2 ] }\n ", nil},
		{"OnePointZero", `{"n":1}`, `{"n":1.0}`, nil},
		{"ExponentOne", `{"n":1}`, `{"n":1e0}`, nil},
		{"ExponentUpper", `{"n":1}`, `{"n":1E+0}`, nil},
		{"NegativeExponent", `{"n":1}`, `{"n":10e-1}`, nil},
		{"FractionExponent", `{"n":1}`, `{"n":0.1e1}`, nil},
		{"TrailingZeros", `{"n":4.5}`, `{"n":4.50000}`, nil},
		{"LargeExponent", `{"n":5000}`, `{"n":5e3}`, nil},
		{"MaxSafeSpellings", `{"n":9007199254740992}`, `{"n":9.007199254740992e15}`, nil},
		{"NegativeZero", `{"n":0}`, `{"n":-0}`, nil},
		{"Fraction", `{"n":0.002}`, `{"n":2e-3}`, nil},
		{"EscapedUnicode", `{"s":"é"}`, `{"s":"\u00e9"}`, nil},
		{"EscapedUnicodeUpperHex", `{"s":"é"}`, `{"s":"\u00E9"}`, nil},
		{"EscapedSlash", `{"s":"a/b"}`, `{"s":"a\/b"}`, nil},
		{"EscapedASCII", `{"s":"A"}`, `{"s":"\u0041"}`, nil},
		{"EscapedNewline", `{"s":"a\nb"}`, `{"s":"a\u000ab"}`, nil},
		{"EscapedHTML", `{"s":"<&>"}`, `{"s":"\u003c\u0026\u003e"}`, nil},
		{"SurrogatePair", `{"s":"😀"}`, `{"s":"\ud83d\ude00"}`, nil},
		{"EscapedMemberName", `{"amount":1}`, `{"\u0061mount":1}`, nil},
		{"NestedOrderAndNumbers", `{"m":{"x":1,"y":[1,2]}}`, `{"m":{"y":[1.0,2e0],"x":10e-1}}`, nil},
		{"EmptyInputIsEmptyObject", ``, `{}`, nil},
		{"IdempotencyKeyIgnored", `{"order_id":"o","idempotency_key":"key-0001"}`, `{"order_id":"o","idempotency_key":"key-0002"}`, nil},
		{"IdempotencyKeyAbsent", `{"order_id":"o"}`, `{"order_id":"o","idempotency_key":"key-0001"}`, nil},
		{"VolatileChanged", `{"order_id":"o","amount_cents":5000,"reason":"duplicate"}`, `{"order_id":"o","amount_cents":5000,"reason":"customer asked"}`, refund},
		{"VolatileAbsent", `{"order_id":"o","amount_cents":5000}`, `{"order_id":"o","amount_cents":5000,"reason":"customer asked"}`, refund},
		{"VolatileOnlyTopLevel", `{"m":{"x":1},"reason":1}`, `{"m":{"x":1},"reason":2}`, refund},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ca, ha := hashOf(t, tt.a, tt.exclude)
			cb, hb := hashOf(t, tt.b, tt.exclude)
			require.Equal(t, ca, cb)
			require.Equal(t, ha, hb)
		})
	}
}

func TestFingerprintDiffer(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name    string
		a, b    string
		exclude []string
	}{
		{"Amount", `{"amount_cents":5000}`, `{"amount_cents":5001}`, nil},
		{"NumberVsString", `{"n":1}`, `{"n":"1"}`, nil},
		{"BoolVsString", `{"b":true}`, `{"b":"true"}`, nil},
		{"NullVsAbsent", `{"a":1,"b":null}`, `{"a":1}`, nil},
		{"NullVsEmptyString", `{"a":null}`, `{"a":""}`, nil},
		{"ArrayOrder", `{"a":[1,2]}`, `{"a":[2,1]}`, nil},
		{"ArrayVsObject", `{"a":[]}`, `{"a":{}}`, nil},
		{"Accent", `{"s":"é"}`, `{"s":"e"}`, nil},
		{"Case", `{"s":"A"}`, `{"s":"a"}`, nil},
		{"Fraction", `{"n":0.1}`, `{"n":0.2}`, nil},
		{"NearMaxSafe", `{"n":9007199254740991}`, `{"n":9007199254740992}`, nil},
		{"Nested", `{"m":{"x":1}}`, `{"m":{"x":2}}`, nil},
		{"MemberName", `{"a":1}`, `{"b":1}`, nil},
		{"VolatileNotExcluded", `{"order_id":"o","reason":"x"}`, `{"order_id":"o","reason":"y"}`, nil},
		{"ExcludeOnlyNamed", `{"reason":"x","memo":"a"}`, `{"reason":"x","memo":"b"}`, []string{"reason"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ha := hashOf(t, tt.a, tt.exclude)
			_, hb := hashOf(t, tt.b, tt.exclude)
			require.NotEqual(t, ha, hb)
		})
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()

	t.Run("CanonicalForm", func(t *testing.T) {
		t.Parallel()
		canonical, hash := hashOf(t, `{"b":[1.0,"\u00e9",true,null],"idempotency_key":"abcdefgh","a":{"z":1e0,"y":"\/<"}}`, nil)
		require.Equal(t, `{"a":{"y":"/<","z":1},"b":[1,"é",true,null]}`, canonical)
		sum := sha256.Sum256([]byte(canonical))
		require.Equal(t, hex.EncodeToString(sum[:]), hash)
	})

	t.Run("EmptyHash", func(t *testing.T) {
		t.Parallel()
		canonical, hash := hashOf(t, `{"idempotency_key":"abcdefgh"}`, nil)
		require.Equal(t, `{}`, canonical)
		require.Equal(t, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", hash)
	})

	t.Run("DoesNotMutate", func(t *testing.T) {
		t.Parallel()
		args, err := DecodeArgs([]byte(`{"order_id":"o","reason":"r","idempotency_key":"abcdefgh"}`))
		require.NoError(t, err)
		_, _, err = Fingerprint(args, []string{"reason"})
		require.NoError(t, err)
		_, err = CanonicalArgs(args)
		require.NoError(t, err)
		require.Equal(t, map[string]any{"order_id": "o", "reason": "r", "idempotency_key": "abcdefgh"}, args)
	})

	t.Run("NotEncodable", func(t *testing.T) {
		t.Parallel()
		_, _, err := Fingerprint(map[string]any{"c": make(chan int)}, nil)
		requireDomainError(t, err, vocab.CodeInternal, "arguments", "cannot be encoded")
	})
}

func TestCanonicalArgs(t *testing.T) {
	t.Parallel()

	args, err := DecodeArgs([]byte(`{"reason":"customer asked","idempotency_key":"abcdefgh","amount_cents":5e3,"order_id":"ord_9f2"}`))
	require.NoError(t, err)
	canonical, err := CanonicalArgs(args)
	require.NoError(t, err)
	require.Equal(t, `{"amount_cents":5000,"order_id":"ord_9f2","reason":"customer asked"}`, string(canonical))

	// The stored form decodes back to the same fingerprint.
	stored, err := DecodeArgs(canonical)
	require.NoError(t, err)
	_, h1, err := Fingerprint(args, []string{"reason"})
	require.NoError(t, err)
	_, h2, err := Fingerprint(stored, []string{"reason"})
	require.NoError(t, err)
	require.Equal(t, h1, h2)
}

func TestDecodeArgs(t *testing.T) {
	t.Parallel()

	t.Run("Values", func(t *testing.T) {
		t.Parallel()
		args, err := DecodeArgs([]byte(`{"s":"x","n":1.50,"b":false,"z":null,"a":[1,"y"],"o":{"k":-2}}`))
		require.NoError(t, err)
		require.Equal(t, map[string]any{
			"s": "x",
			"n": json.Number("1.50"),
			"b": false,
			"z": nil,
			"a": []any{json.Number("1"), "y"},
			"o": map[string]any{"k": json.Number("-2")},
		}, args)
	})

	t.Run("EmptyInput", func(t *testing.T) {
		t.Parallel()
		for _, raw := range [][]byte{nil, {}} {
			args, err := DecodeArgs(raw)
			require.NoError(t, err)
			require.NotNil(t, args)
			require.Empty(t, args)
		}
	})

	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			name string
			raw  string
		}{
			{"MaxSafe", `{"n":9007199254740992}`},
			{"MinSafe", `{"n":-9007199254740992}`},
			{"MaxSafeFractionZero", `{"n":9007199254740992.000}`},
			{"MaxSafeExponent", `{"n":9.007199254740992e15}`},
			{"Fraction", `{"n":0.1}`},
			{"SmallestDenormal", `{"n":5e-324}`},
			{"ZeroWithHugeExponent", `{"n":0e999999}`},
			{"NegativeZero", `{"n":-0.0}`},
			{"MaxDepth", nested(MaxArgsDepth)},
			{"MaxDepthArrays", nestedArrays(MaxArgsDepth)},
			{"SurrogatePair", `{"s":"\ud83d\ude00"}`},
			{"EscapedBackslashBeforeU", `{"s":"\\ud800"}`},
			{"ControlEscapes", `{"s":"\b\f\n\r\t\u0001\u001f"}`},
			{"EmptyName", `{"":1}`},
			{"TrailingWhitespace", "{}\r\n\t "},
			{"SameNameInSiblings", `{"a":{"x":1},"b":{"x":1},"x":[{"x":1},{"x":2}]}`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				_, err := DecodeArgs([]byte(tt.raw))
				require.NoError(t, err)
			})
		}
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			name    string
			raw     string
			field   string
			msgPart string
		}{
			{"Null", `null`, "arguments", "must be a JSON object, not null"},
			{"Array", `[]`, "arguments", "must be a JSON object, not an array"},
			{"ArrayOfObject", `[{"a":1}]`, "arguments", "must be a JSON object"},
			{"Number", `1`, "arguments", "not a number"},
			{"String", `"abc"`, "arguments", "not a string"},
			{"Bool", `true`, "arguments", "not a boolean"},
			{"WhitespaceOnly", ` `, "arguments", "unexpected end"},
			{"Unterminated", `{"a":1`, "arguments", "unexpected end"},
			{"TrailingComma", `{"a":1,}`, "arguments", "not valid JSON"},
			{"MissingColon", `{"a" 1}`, "arguments", "not valid JSON"},
			{"SingleQuotes", `{'a':1}`, "arguments", "not valid JSON"},
			{"NaN", `{"a":NaN}`, "arguments", "not valid JSON"},
			{"LeadingZero", `{"a":01}`, "arguments", "not valid JSON"},
			{"TrailingObject", `{} {}`, "arguments", "unexpected data after the arguments object at byte 3"},
			{"TrailingGarbage", `{"a":1}x`, "arguments", "unexpected data after"},
			{"TrailingBracket", `{}]`, "arguments", "unexpected data after"},
			{"TrailingNull", "{}\nnull", "arguments", "unexpected data after"},
			{"DuplicateTopLevel", `{"amount_cents":100,"amount_cents":200}`, "amount_cents", `duplicate member name "amount_cents"`},
			{"DuplicateSameValue", `{"a":1,"b":2,"a":1}`, "a", "duplicate"},
			{"DuplicateEscaped", `{"a":1,"\u0061":2}`, "a", "duplicate"},
			{"DuplicateNested", `{"meta":{"x":1,"x":2}}`, "meta.x", "duplicate"},
			{"DuplicateInArray", `{"items":[{"sku":1},{"sku":1,"sku":2}]}`, "items[1].sku", "duplicate"},
			{"DuplicateDeep", `{"a":{"b":{"c":{"d":1,"d":2}}}}`, "a.b.c.d", "duplicate"},
			{"DuplicateEmptyName", `{"":1,"":2}`, "arguments", "duplicate"},
			{"AboveMaxSafe", `{"amount_cents":9007199254740993}`, "amount_cents", "out of range"},
			{"BelowMinSafe", `{"amount_cents":-9007199254740993}`, "amount_cents", "out of range"},
			{"AboveMaxSafeFraction", `{"n":9007199254740992.5}`, "n", "out of range"},
			{"AboveMaxSafeTiny", `{"n":9007199254740992.000000000000000000001}`, "n", "out of range"},
			{"AboveMaxSafeExponent", `{"n":9.007199254740993e15}`, "n", "out of range"},
			{"AboveMaxSafeNegativeExponent", `{"n":90071992547409921e-1}`, "n", "out of range"},
			{"Huge", `{"n":1e300}`, "n", "out of range"},
			{"NegativeHuge", `{"n":-1e300}`, "n", "out of range"},
			{"Overflow", `{"n":1e400}`, "n", "out of range"},
			{"Underflow", `{"n":1e-400}`, "n", "rounds to zero"},
			{"NumberInArray", `{"m":{"n":[1,1e300]}}`, "m.n[1]", "out of range"},
			{"LongNumberTruncated", `{"n":` + strings.Repeat("9", 100) + `}`, "n", "99999999999999999999999999999999... is out of range"},
			{"TooDeep", nested(MaxArgsDepth + 1), strings.TrimSuffix(strings.Repeat("a.", MaxArgsDepth), "."), "nested deeper than 32 levels"},
			{"TooDeepArrays", nestedArrays(MaxArgsDepth + 1), "a" + strings.Repeat("[0]", MaxArgsDepth-1), "nested deeper than 32 levels"},
			{"VeryDeep", strings.Repeat("[", 60000), "arguments", "must be a JSON object"},
			{"VeryDeepObject", `{"a":` + strings.Repeat("[", 60000), "a" + strings.Repeat("[0]", MaxArgsDepth-1), "nested deeper"},
			{"InvalidUTF8Value", "{\"s\":\"ab\xffc\"}", "s", "not valid UTF-8"},
			{"InvalidUTF8Name", "{\"a\xff\":1}", "a\ufffd", "not valid UTF-8"},
			{"EncodedSurrogateUTF8", "{\"s\":\"\xed\xa0\x80\"}", "s", "not valid UTF-8"},
			{"InvalidUTF8OutsideString", "{\xff}", "arguments", "not valid JSON"},
			{"LoneHighSurrogate", `{"s":"\ud800"}`, "s", `unpaired UTF-16 surrogate escape \ud800`},
			{"LoneLowSurrogate", `{"s":"x\udc00"}`, "s", `unpaired UTF-16 surrogate escape \udc00`},
			{"HighThenNonSurrogate", `{"s":"\ud800\u0041"}`, "s", "unpaired"},
			{"HighThenHigh", `{"s":"\ud800\ud800"}`, "s", "unpaired"},
			{"HighAtEnd", `{"s":"ab\uD83D"}`, "s", "unpaired"},
			{"LoneSurrogateInName", `{"\udfff":1}`, "\ufffd", "unpaired"},
			{"LoneSurrogateNested", `{"m":{"x":["ok","\ud800x"]}}`, "m.x[1]", "unpaired"},
			{"RawControlChar", "{\"s\":\"a\x01\"}", "arguments", "not valid JSON"},
			{"BadEscape", `{"s":"\x"}`, "arguments", "not valid JSON"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				args, err := DecodeArgs([]byte(tt.raw))
				requireDomainError(t, err, vocab.CodeInvalidArgument, tt.field, tt.msgPart)
				require.Nil(t, args)
			})
		}
	})

	t.Run("SizeLimit", func(t *testing.T) {
		t.Parallel()
		// {"a":"xxx…"} of exactly MaxArgsBytes bytes.
		exact := `{"a":"` + strings.Repeat("x", MaxArgsBytes-len(`{"a":""}`)) + `"}`
		require.Len(t, exact, MaxArgsBytes)
		_, err := DecodeArgs([]byte(exact))
		require.NoError(t, err)

		over := `{"a":"` + strings.Repeat("x", MaxArgsBytes+1-len(`{"a":""}`)) + `"}`
		_, err = DecodeArgs([]byte(over))
		requireDomainError(t, err, vocab.CodeInvalidArgument, "arguments", "65537 bytes, more than the limit of 65536 bytes")
	})
}

func TestDiffFields(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name    string
		a, b    string
		exclude []string
		want    []string
	}{
		{"Same", `{"order_id":"o","amount_cents":5000}`, `{"amount_cents":5000,"order_id":"o"}`, nil, nil},
		{"NumberSpelling", `{"amount_cents":5000}`, `{"amount_cents":5e3}`, nil, nil},
		{"NestedOrder", `{"m":{"x":1,"y":2}}`, `{"m":{"y":2.0,"x":1}}`, nil, nil},
		{"OneDiffers", `{"order_id":"o","amount_cents":5000}`, `{"order_id":"o","amount_cents":4000}`, nil, []string{"amount_cents"}},
		{"Sorted", `{"z":1,"a":1,"m":1}`, `{"z":2,"a":2,"m":2}`, nil, []string{"a", "m", "z"}},
		{"OnlyInA", `{"order_id":"o","extra":1}`, `{"order_id":"o"}`, nil, []string{"extra"}},
		{"OnlyInB", `{"order_id":"o"}`, `{"order_id":"o","extra":null}`, nil, []string{"extra"}},
		{"NestedDiffers", `{"m":{"x":1}}`, `{"m":{"x":2}}`, nil, []string{"m"}},
		{"TypeDiffers", `{"n":1}`, `{"n":"1"}`, nil, []string{"n"}},
		{"IdempotencyKeyIgnored", `{"idempotency_key":"abcdefgh","a":1}`, `{"idempotency_key":"zzzzzzzz"}`, nil, []string{"a"}},
		{"ExcludedIgnored", `{"reason":"x","amount_cents":1}`, `{"amount_cents":2}`, []string{"reason"}, []string{"amount_cents"}},
		{"ExcludedNotIgnoredWithoutExclude", `{"reason":"x"}`, `{"reason":"y"}`, nil, []string{"reason"}},
		{"BothEmpty", ``, `{}`, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := DecodeArgs([]byte(tt.a))
			require.NoError(t, err)
			b, err := DecodeArgs([]byte(tt.b))
			require.NoError(t, err)
			require.Equal(t, tt.want, DiffFields(a, b, tt.exclude))
			require.Equal(t, tt.want, DiffFields(b, a, tt.exclude))
		})
	}

	t.Run("MixedNumberTypes", func(t *testing.T) {
		t.Parallel()
		// A value decoded elsewhere as float64 compares equal to the same
		// number as json.Number.
		require.Empty(t, DiffFields(map[string]any{"n": 1.0}, map[string]any{"n": json.Number("1e0")}, nil))
	})

	t.Run("NotEncodable", func(t *testing.T) {
		t.Parallel()
		ch := make(chan int)
		require.Empty(t, DiffFields(map[string]any{"c": ch}, map[string]any{"c": ch}, nil))
		require.Equal(t, []string{"c"}, DiffFields(map[string]any{"c": ch}, map[string]any{"c": make(chan int)}, nil))
		require.Equal(t, []string{"c"}, DiffFields(map[string]any{"c": ch}, map[string]any{"c": 1}, nil))
	})
}

func TestDecodeArgsRefusesNUL(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`{"reason":"a\u0000b"}`, `{"a\u0000":1}`, `{"m":{"x":["\u0000"]}}`} {
		_, err := DecodeArgs([]byte(raw))
		var derr *vocab.Error
		require.ErrorAs(t, err, &derr, raw)
		require.Equal(t, vocab.CodeInvalidArgument, derr.Code)
		require.Contains(t, derr.Message, "NUL")
	}
}

func TestDecodeArgsKeyProblemsKeepTheKeyCode(t *testing.T) {
	t.Parallel()
	_, err := DecodeArgs([]byte(`{"idempotency_key":"abc\u0000defgh"}`))
	requireDomainError(t, err, vocab.CodeInvalidIdempotencyKey, "idempotency_key", "NUL")
}
