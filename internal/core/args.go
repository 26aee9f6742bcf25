package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/idemgate/idemgate/internal/vocab"
)

// Limits DecodeArgs enforces on tool arguments.
const (
	// MaxArgsDepth is the deepest nesting of objects and arrays accepted in
	// tool arguments; the top-level object is depth 1.
	MaxArgsDepth = 32
	// MaxArgsBytes is the largest raw size of tool arguments accepted, in
	// bytes (64 KiB).
	MaxArgsBytes = 64 << 10
)

// maxSafeInteger is 2^53, the largest magnitude up to which every integer is
// exactly representable as an IEEE 754 double. Numbers are hashed as doubles
// (RFC 8785), so anything larger could hash equal to a different value.
const maxSafeInteger = 1 << 53

// argsField is the Field named by errors about the arguments as a whole.
const argsField = "arguments"

// argsError returns an invalid_argument error about field, or about the
// arguments as a whole when field is empty (a member with an empty name).
func argsError(field, format string, args ...any) *vocab.Error {
	if field == "" {
		field = argsField
	}
	return vocab.Errorf(vocab.CodeInvalidArgument, field, format, args...)
}

// DecodeArgs decodes the raw JSON arguments of a tool call, once, into the
// value that is then both hashed (Fingerprint) and executed.
//
// The top level must be a JSON object; empty input (no arguments at all, as
// MCP clients may send) decodes to an empty map, while null, arrays and
// scalars are refused. Numbers are json.Number holding the client's literal.
// DecodeArgs refuses, with a *domain.Error of Code domain.CodeInvalidArgument:
//   - input larger than MaxArgsBytes or nested deeper than MaxArgsDepth;
//   - malformed JSON, and any data after the top-level object;
//   - a member name that occurs twice in one object, at any depth;
//   - a number whose magnitude exceeds 2^53 (9007199254740992), or that is
//     not representable as a finite double (overflow, or a non-zero literal
//     that underflows to zero);
//   - invalid UTF-8, or an escaped UTF-16 surrogate without its pair, in a
//     string or member name.
//
// Field names where the problem is, as a dotted path with array indexes in
// brackets ("amount_cents", "meta.x", "items[2].sku"), or "arguments" when
// the problem concerns the input as a whole.
func DecodeArgs(raw []byte) (map[string]any, error) {
	if len(raw) == 0 {
		return map[string]any{}, nil
	}
	if len(raw) > MaxArgsBytes {
		return nil, argsError(argsField, "arguments are %d bytes, more than the limit of %d bytes", len(raw), MaxArgsBytes)
	}
	d := &argsDecoder{raw: raw, dec: json.NewDecoder(bytes.NewReader(raw))}
	d.dec.UseNumber()

	tok, err := d.token(argsField)
	if err != nil {
		return nil, err
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return nil, argsError(argsField, "arguments must be a JSON object, not %s", describeToken(tok))
	}
	args, err := d.object("", 1)
	if err != nil {
		return nil, err
	}
	off := d.dec.InputOffset()
	if rest := bytes.TrimLeft(raw[off:], " \t\r\n"); len(rest) > 0 {
		return nil, argsError(argsField, "unexpected data after the arguments object at byte %d", len(raw)-len(rest))
	}
	return args, nil
}

// argsDecoder walks the token stream of encoding/json's Decoder, building the
// decoded value and checking what the Decoder lets through: duplicate names,
// depth, number range and the exact bytes of every string.
type argsDecoder struct {
	raw []byte
	dec *json.Decoder
}

// token reads the next token, turning a syntax error into an
// invalid_argument error about field.
func (d *argsDecoder) token(field string) (json.Token, error) {
	tok, err := d.dec.Token()
	if err == nil {
		return tok, nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, argsError(argsField, "arguments are not valid JSON: unexpected end of input")
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return nil, argsError(argsField, "arguments are not valid JSON: %s (at byte %d)", syntax.Error(), syntax.Offset)
	}
	return nil, argsError(field, "arguments are not valid JSON: %s", err.Error())
}

// object decodes the members of an object whose '{' has been read; path names
// the object and depth is its nesting level.
func (d *argsDecoder) object(path string, depth int) (map[string]any, error) {
	obj := map[string]any{}
	for d.dec.More() {
		start := d.dec.InputOffset()
		tok, err := d.token(path)
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, argsError(argsField, "arguments are not valid JSON: member name is %s", describeToken(tok))
		}
		memberPath := name
		if path != "" {
			memberPath = path + "." + name
		}
		if err := d.checkString(memberPath, start); err != nil {
			return nil, err
		}
		if _, dup := obj[name]; dup {
			return nil, argsError(memberPath, "duplicate member name %q", name)
		}
		v, err := d.value(memberPath, depth)
		if err != nil {
			return nil, err
		}
		obj[name] = v
	}
	if _, err := d.token(path); err != nil { // the closing '}'
		return nil, err
	}
	return obj, nil
}

// array decodes the elements of an array whose '[' has been read.
func (d *argsDecoder) array(path string, depth int) ([]any, error) {
	arr := []any{}
	for i := 0; d.dec.More(); i++ {
		v, err := d.value(path+"["+strconv.Itoa(i)+"]", depth)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
	}
	if _, err := d.token(path); err != nil { // the closing ']'
		return nil, err
	}
	return arr, nil
}

// value decodes one value at path, inside a container at depth.
func (d *argsDecoder) value(path string, depth int) (any, error) {
	start := d.dec.InputOffset()
	tok, err := d.token(path)
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth+1 > MaxArgsDepth {
			return nil, argsError(path, "arguments are nested deeper than %d levels", MaxArgsDepth)
		}
		switch t {
		case '{':
			return d.object(path, depth+1)
		case '[':
			return d.array(path, depth+1)
		}
		return nil, argsError(argsField, "arguments are not valid JSON: unexpected %q", rune(t))
	case string:
		if err := d.checkString(path, start); err != nil {
			return nil, err
		}
		return t, nil
	case json.Number:
		if err := checkNumber(path, string(t)); err != nil {
			return nil, err
		}
		return t, nil
	case bool, nil:
		return t, nil
	}
	return nil, argsError(path, "unexpected JSON token %T", tok)
}

// checkString checks the raw bytes of the string token that the Decoder just
// returned, which began at or after offset start. encoding/json silently
// replaces invalid UTF-8 and unpaired surrogate escapes with U+FFFD; here they
// are refused instead, so that what is hashed is what the client sent.
func (d *argsDecoder) checkString(path string, start int64) error {
	end := d.dec.InputOffset()
	if start < 0 || end > int64(len(d.raw)) || start > end {
		return argsError(path, "arguments could not be read")
	}
	seg := d.raw[start:end]
	q := bytes.IndexByte(seg, '"') // only whitespace, ',' and ':' precede it
	if q < 0 || len(seg)-q < 2 {
		return argsError(path, "arguments could not be read")
	}
	lit := seg[q+1 : len(seg)-1] // without the quotes
	if !utf8.Valid(lit) {
		return argsError(path, "string is not valid UTF-8")
	}
	for i := 0; i < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		i++
		if i >= len(lit) || lit[i] != 'u' {
			continue
		}
		r, ok := hex4(lit, i+1)
		if !ok {
			return argsError(path, "string has an invalid \\u escape")
		}
		i += 4
		switch {
		case r == 0:
			// Postgres text and jsonb cannot hold U+0000: refuse it here,
			// with a field, rather than fail at the store.
			if path == "idempotency_key" {
				// Still a key problem, with the key's own code.
				return vocab.Errorf(vocab.CodeInvalidIdempotencyKey, path, "string contains U+0000 (NUL)")
			}
			return argsError(path, "string contains U+0000 (NUL)")
		case 0xDC00 <= r && r <= 0xDFFF:
			return argsError(path, "string has an unpaired UTF-16 surrogate escape \\u%04x", r)
		case 0xD800 <= r && r <= 0xDBFF:
			lo, ok := rune(0), false
			if i+2 < len(lit) && lit[i+1] == '\\' && lit[i+2] == 'u' {
				lo, ok = hex4(lit, i+3)
			}
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return argsError(path, "string has an unpaired UTF-16 surrogate escape \\u%04x", r)
			}
			i += 6
		}
	}
	return nil
}

// hex4 decodes the four hex digits of a \u escape at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

// checkNumber refuses a number literal that is not a finite double, that is
// non-zero but rounds to zero, or whose exact magnitude exceeds 2^53.
func checkNumber(path, lit string) error {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return argsError(path, "number %s is out of range (magnitude above 2^53 = %d)", shortLiteral(lit), maxSafeInteger)
	}
	switch a := math.Abs(f); {
	case a > maxSafeInteger:
		return argsError(path, "number %s is out of range (magnitude above 2^53 = %d)", shortLiteral(lit), maxSafeInteger)
	case a == maxSafeInteger:
		// Rounding to a double may have hidden a literal just above 2^53,
		// such as 9007199254740993: compare the exact decimal value.
		exact, ok := new(big.Rat).SetString(lit)
		if !ok || exact.Abs(exact).Cmp(new(big.Rat).SetInt64(maxSafeInteger)) > 0 {
			return argsError(path, "number %s is out of range (magnitude above 2^53 = %d)", shortLiteral(lit), maxSafeInteger)
		}
	case a == 0:
		mantissa, _, _ := strings.Cut(strings.ToLower(lit), "e")
		if strings.ContainsAny(mantissa, "123456789") {
			return argsError(path, "number %s is too small to represent (it rounds to zero)", shortLiteral(lit))
		}
	}
	return nil
}

// shortLiteral bounds a number literal for an error message.
func shortLiteral(lit string) string {
	const maxLen = 32
	if len(lit) > maxLen {
		return lit[:maxLen] + "..."
	}
	return lit
}

// describeToken names the kind of a top-level JSON token for an error message.
func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		if t == '[' {
			return "an array"
		}
		return fmt.Sprintf("%q", rune(t))
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", tok)
}

// Fingerprint returns the canonical form and hash that identify the intent of
// a tool call: args without the top-level member "idempotency_key" and
// without the tool's volatile members named in exclude, encoded with
// encoding/json and canonicalized with RFC 8785 (JCS). hash is the lowercase
// hex SHA-256 of canonical. args is not modified.
//
// Arguments that differ only in member order, whitespace, number spelling
// (1, 1.0, 1e0, 10e-1), string escapes ("\u00e9" or "é", "\/" or "/") or
// volatile members have the same hash. args is expected to come from
// DecodeArgs, which refuses the numbers (beyond 2^53) that would lose
// precision in canonical form. An error is a *domain.Error with Code
// vocab.CodeInternal: args holds something JSON cannot encode.
func Fingerprint(args map[string]any, exclude []string) (canonical []byte, hash string, err error) {
	canonical, err = canonicalMembers(args, exclude)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(canonical)
	return canonical, hex.EncodeToString(sum[:]), nil
}

// CanonicalArgs returns the RFC 8785 (JCS) canonical JSON of args without the
// top-level member "idempotency_key" but with volatile members: the arguments
// as stored in a claim. args is not modified. An error is a *domain.Error as
// for Fingerprint.
func CanonicalArgs(args map[string]any) ([]byte, error) {
	return canonicalMembers(args, nil)
}

// canonicalMembers canonicalizes a shallow copy of args without
// "idempotency_key" and the names in exclude.
func canonicalMembers(args map[string]any, exclude []string) ([]byte, error) {
	kept := make(map[string]any, len(args))
	for name, v := range args {
		if name == keyField || name == ConfirmField || slices.Contains(exclude, name) {
			continue
		}
		kept[name] = v
	}
	return canonicalJSON(kept)
}

// canonicalJSON encodes v with encoding/json (json.Number as its literal,
// without HTML escaping) and canonicalizes the result with JCS.
func canonicalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, vocab.Errorf(vocab.CodeInternal, argsField, "arguments cannot be encoded as JSON: %v", err)
	}
	out, err := jcs.Transform(buf.Bytes())
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeInternal, argsField, "arguments cannot be canonicalized: %v", err)
	}
	return out, nil
}

// DiffFields returns, sorted, the top-level member names whose values differ
// between a and b, ignoring "idempotency_key" and the names in exclude.
// Values are compared in canonical (JCS) form, so member order and number
// spelling (1 and 1.0) do not count as differences; a member present on only
// one side does. It is what a conflict reports to the client.
func DiffFields(a, b map[string]any, exclude []string) []string {
	var diff []string
	consider := func(name string) bool {
		return name != keyField && name != ConfirmField && !slices.Contains(exclude, name)
	}
	for name, av := range a {
		if !consider(name) {
			continue
		}
		bv, ok := b[name]
		if !ok || !sameValue(av, bv) {
			diff = append(diff, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok && consider(name) {
			diff = append(diff, name)
		}
	}
	slices.Sort(diff)
	return diff
}

// sameValue reports whether a and b have the same canonical JSON. Values that
// cannot be canonicalized are equal only if they are deeply equal.
func sameValue(a, b any) bool {
	ca, errA := canonicalJSON(a)
	cb, errB := canonicalJSON(b)
	if errA != nil || errB != nil {
		return errA != nil && errB != nil && reflect.DeepEqual(a, b)
	}
	return bytes.Equal(ca, cb)
}
