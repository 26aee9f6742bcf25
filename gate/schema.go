package gate

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Argument constraints shared by the built-in tools, for the idem struct
// tag's short forms.
const (
	// idPattern is what ids (orders, customers, seats, users) look like:
	// the tag `idem:"id"`.
	idPattern = vocab.IDPattern
	// currencyPattern is an ISO 4217 code in Stripe's lowercase form: the
	// tag `idem:"currency"`.
	currencyPattern = `^[a-z]{3}$`
	// maxTextLen is the longest free text, in characters: the tag
	// `idem:"text"`.
	maxTextLen = 500
	// maxAmountCents is the largest amount in minor units: the tag
	// `idem:"cents"` (1 to maxAmountCents).
	maxAmountCents = 1_000_000_000
)

// keyField is the argument every mutation takes.
const keyField = "idempotency_key"

// keyDescription is the idempotency key's published description.
const keyDescription = "Client-chosen key, 8 to 128 characters of [A-Za-z0-9._:-], one per intent. When you retry the same intent (after a timeout, an error, or in a later turn), send the same key again: it returns the first outcome and never runs twice. Never reuse a key for another intent."

// confirmDescription is the confirmation argument's published description.
const confirmDescription = "Leave out. Only after this tool answered possible_duplicate, and only when the person confirms that this call is a new, separate intent, set it to the operation_id that answer named. When retrying the same intent, reuse its idempotency_key instead."

// objectSchema is a tool's argument schema, ready to validate.
type objectSchema struct {
	props     map[string]*prop
	order     []string
	published json.RawMessage
}

type prop struct {
	name     string
	typ      string // string, integer, number, boolean
	required bool
	pattern  *regexp.Regexp
	patHint  string
	minLen   *int
	maxLen   *int
	min, max *float64
	enum     []string
	isKey    bool
}

// typeSchemas are the schemas of Go types that are not plain JSON.
var typeSchemas = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[time.Time]():       {Type: "string", Format: "date-time"},
	reflect.TypeFor[json.RawMessage](): {},
}

// inputSchema derives A's schema: jsonschema-go's inference (types,
// `jsonschema` descriptions, required unless omitempty) plus the
// constraints of `idem` tags, for a mutation the idempotency key, and for
// a guarded one (Policy.DuplicateWindow) the confirmation argument.
func inputSchema[A any](mutating, guarded bool) (*objectSchema, error) {
	t := reflect.TypeFor[A]()
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s must be a struct", t)
	}
	s, err := jsonschema.For[A](&jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		return nil, err
	}
	if s.Properties == nil {
		s.Properties = map[string]*jsonschema.Schema{}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name := jsonName(f)
		if name == "" {
			continue
		}
		if (name == keyField || name == core.ConfirmField) && mutating {
			return nil, fmt.Errorf("field %s: %s is added by idemgate; do not declare it", f.Name, name)
		}
		ps, ok := s.Properties[name]
		if !ok {
			continue
		}
		if ps.Type == "" {
			return nil, fmt.Errorf("field %s: only strings, integers, numbers and booleans are supported as arguments", f.Name)
		}
		if err := applyTag(ps, f.Tag.Get("idem")); err != nil {
			return nil, fmt.Errorf("field %s: %w", f.Name, err)
		}
	}
	if mutating {
		s.Properties[keyField] = &jsonschema.Schema{
			Type: "string", MinLength: ptr(core.KeyMinLen), MaxLength: ptr(core.KeyMaxLen),
			Pattern: "^[A-Za-z0-9._:-]+$", Description: keyDescription,
		}
		s.Required = append(s.Required, keyField)
		s.PropertyOrder = append(s.PropertyOrder, keyField)
	}
	if mutating && guarded {
		s.Properties[core.ConfirmField] = &jsonschema.Schema{Type: "string", Format: "uuid", Description: confirmDescription}
		s.PropertyOrder = append(s.PropertyOrder, core.ConfirmField)
	}
	s.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}}
	published, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return compile(s, published)
}

// outputSchema derives the published outputSchema and R's top-level member
// names. A read tool answers R; a mutation answers the envelope (outcome,
// replayed, retry_after_ms, operation) with R as operation.result. A tool
// error answers the error body instead, and MCP clients validate error
// results too, so the published schema is either of the two.
func outputSchema[R any](mutating bool) (json.RawMessage, []string, error) {
	t := reflect.TypeFor[R]()
	if t.Kind() != reflect.Struct {
		return nil, nil, fmt.Errorf("%s must be a struct", t)
	}
	r, err := jsonschema.For[R](&jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(r.Properties))
	for name := range r.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	success := r
	if mutating {
		if success, err = envelopeSchema(r); err != nil {
			return nil, nil, err
		}
	}
	errBody, err := errorSchema()
	if err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(&jsonschema.Schema{Type: "object", AnyOf: []*jsonschema.Schema{success, errBody}})
	return b, names, err
}

// envelopeSchema is a mutation's answer with result r.
func envelopeSchema(r *jsonschema.Schema) (*jsonschema.Schema, error) {
	op, err := jsonschema.For[vocab.Operation](&jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		return nil, err
	}
	op.Properties["result"] = r
	op.Properties["status"] = &jsonschema.Schema{Type: "string", Enum: []any{"queued", "running", "succeeded", "failed"}}
	return &jsonschema.Schema{
		Type: "object",
		Properties: map[string]*jsonschema.Schema{
			"outcome":        {Type: "string", Enum: []any{"accepted", "replayed", "in_flight"}, Description: "accepted: this call created the operation; replayed: the stored outcome of an earlier call; in_flight: an earlier call's operation still runs (poll get_operation)."},
			"replayed":       {Type: "boolean"},
			"retry_after_ms": {Type: "integer", Description: "For in_flight: when to poll again."},
			"operation":      op,
		},
		Required: []string{"outcome", "operation"},
	}, nil
}

// errorSchema is the body of a tool error.
func errorSchema() (*jsonschema.Schema, error) {
	return &jsonschema.Schema{
		Type: "object",
		Properties: map[string]*jsonschema.Schema{
			"error": {
				Type: "object",
				Properties: map[string]*jsonschema.Schema{
					"code":    {Type: "string", Description: "A stable error code, such as invalid_argument or card_declined."},
					"message": {Type: "string"},
					"field":   {Type: "string", Description: "The argument the error is about."},
					"fields":  {Type: "array", Items: &jsonschema.Schema{Type: "string"}, Description: "For a conflict: the arguments that differ."},
				},
				Required: []string{"code", "message"},
			},
			"replayed":       {Type: "boolean"},
			"retry_after_ms": {Type: "integer"},
			"operation":      {Type: "object"},
		},
		Required: []string{"error"},
	}, nil
}

func jsonName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag := f.Tag.Get("json")
	if tag == "-" {
		return ""
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	return name
}

// The idem struct tag constrains one argument beyond its JSON type. Its
// grammar:
//
//	tag    = option { "," option }
//	option = "id" | "currency" | "text" | "cents"
//	       | "min=" NUMBER | "max=" NUMBER
//	       | "minlen=" COUNT | "maxlen=" COUNT
//	       | "enum=" VALUE { "|" VALUE }
//	       | "pattern=" RE      (last: RE is the rest of the tag, verbatim)
//
// The options, and the argument types they apply to:
//
//	id         string   an id: pattern vocab.IDPattern (`idem:"id"`)
//	currency   string   a lowercase ISO 4217 code: pattern ^[a-z]{3}$
//	text       string   free text: at most 500 characters
//	cents      integer  an amount in minor units: 1 to 1_000_000_000
//	min=N      integer, number  at least N (`idem:"min=1,max=100"`)
//	max=N      integer, number  at most N
//	minlen=N   string   at least N characters (Unicode code points)
//	maxlen=N   string   at most N characters
//	enum=a|b   string   one of the listed values (`idem:"enum=queued|failed"`)
//	pattern=RE string   matches RE, Go's regexp syntax (RE2), unanchored:
//	                    write ^ and $ (`idem:"minlen=3,pattern=^[a-z0-9-]+$"`)
//
// Options are separated by commas and none may repeat; min and max may
// not exceed each other, nor minlen and maxlen. Options that set the same
// constraint exclude each other: id, currency and pattern (the pattern);
// text and maxlen (the longest length); cents and min or max (the range).
// Enum values may not be empty or contain a comma or "|".
//
// pattern must be the last option, and its value runs to the end of the
// tag, commas included: `idem:"pattern=^[a-z]{1,3}(,[a-z]{1,3})*$"`. A
// comma in the pattern followed by something that reads as an option (one
// of the bare names, or a known name and "=") is refused, because it is
// almost certainly an option written after the pattern:
// `idem:"pattern=^[a-z]+$,minlen=3"` is refused, naming the field and the
// tag, with the tag rewritten pattern-last.
//
// Every mistake (an unknown option, a malformed value, an option for
// another type) is refused when the tool is declared (Registry.Add), with
// an error naming the Go field and its tag; nothing is ignored.

// tagOptions are the idem tag's options: whether each is bare (no
// value), the argument types it applies to, and the constraints (schema
// keywords) it sets; two options that set one constraint exclude each
// other.
var tagOptions = map[string]struct {
	bare  bool
	types []string
	sets  []string
}{
	"id":       {true, []string{"string"}, []string{"pattern"}},
	"currency": {true, []string{"string"}, []string{"pattern"}},
	"text":     {true, []string{"string"}, []string{"maxLength"}},
	"cents":    {true, []string{"integer"}, []string{"minimum", "maximum"}},
	"min":      {false, []string{"integer", "number"}, []string{"minimum"}},
	"max":      {false, []string{"integer", "number"}, []string{"maximum"}},
	"minlen":   {false, []string{"string"}, []string{"minLength"}},
	"maxlen":   {false, []string{"string"}, []string{"maxLength"}},
	"enum":     {false, []string{"string"}, []string{"enum"}},
	"pattern":  {false, []string{"string"}, []string{"pattern"}},
}

// readsAsOption reports whether part, one comma-separated piece of a tag,
// reads as an option: a bare option's name, or a known name and "=".
func readsAsOption(part string) bool {
	if o, ok := tagOptions[part]; ok && o.bare {
		return true
	}
	name, _, hasVal := strings.Cut(part, "=")
	o, ok := tagOptions[name]
	return hasVal && ok && !o.bare
}

// applyTag adds the constraints of an idem tag (the grammar above) to s,
// the schema of an argument of type s.Type.
func applyTag(s *jsonschema.Schema, tag string) error {
	if tag == "" {
		return nil
	}
	if err := parseTag(s, tag); err != nil {
		return fmt.Errorf("idem:%q: %w", tag, err)
	}
	return nil
}

// parseTag is applyTag without the tag in its errors.
func parseTag(s *jsonschema.Schema, tag string) error {
	set := map[string]string{} // constraint → the option that set it
	for rest := tag; ; {
		var part string
		last := false
		if strings.HasPrefix(rest, "pattern=") {
			part, last = rest, true
			// The pattern runs to the end; refuse an option hidden in it.
			pieces := strings.Split(rest, ",")
			for i, p := range pieces[1:] {
				if readsAsOption(p) {
					before := strings.Join(pieces[:i+1], ",")
					after := strings.Join(pieces[i+1:], ",")
					return fmt.Errorf("pattern must be the last option (its value runs to the end of the tag), but %q follows it and reads as an option: write %q", ","+after, after+","+before)
				}
			}
		} else {
			var more bool
			part, rest, more = strings.Cut(rest, ",")
			last = !more
		}
		if err := applyOption(s, part, set); err != nil {
			return err
		}
		if last {
			break
		}
	}
	if s.Minimum != nil && s.Maximum != nil && *s.Minimum > *s.Maximum {
		return fmt.Errorf("min=%s exceeds max=%s", fmtNum(*s.Minimum), fmtNum(*s.Maximum))
	}
	if s.MinLength != nil && s.MaxLength != nil && *s.MinLength > *s.MaxLength {
		return fmt.Errorf("minlen=%d exceeds the longest length, %d", *s.MinLength, *s.MaxLength)
	}
	return nil
}

// applyOption applies one option of a tag; set records the constraints
// set so far, and by which option.
func applyOption(s *jsonschema.Schema, part string, set map[string]string) error {
	if part == "" {
		return fmt.Errorf("empty option (two commas in a row, or a comma at an end)")
	}
	name, val, hasVal := strings.Cut(part, "=")
	o, known := tagOptions[name]
	switch {
	case !known:
		return fmt.Errorf("unknown option %q (known: id, currency, text, cents, min=, max=, minlen=, maxlen=, enum=, pattern=)", name)
	case o.bare && hasVal:
		return fmt.Errorf("option %s takes no value, got %q", name, part)
	case !o.bare && !hasVal:
		return fmt.Errorf("option %s needs a value: %s=…", name, name)
	case !slices.Contains(o.types, s.Type):
		return fmt.Errorf("option %s applies to %s arguments; this one is %s", name, strings.Join(o.types, " or "), s.Type)
	}
	for _, c := range o.sets {
		switch other := set[c]; {
		case other == name:
			return fmt.Errorf("option %s appears twice", name)
		case other != "":
			return fmt.Errorf("options %s and %s both set the %s; keep one", other, name, c)
		}
		set[c] = name
	}
	switch name {
	case "id":
		s.Pattern = idPattern
	case "currency":
		s.Pattern = currencyPattern
	case "text":
		s.MaxLength = ptr(maxTextLen)
	case "cents":
		s.Minimum, s.Maximum = ptr(1.0), ptr(float64(maxAmountCents))
	case "min", "max":
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("option %s needs a finite number, got %q", name, val)
		}
		if name == "min" {
			s.Minimum = &f
		} else {
			s.Maximum = &f
		}
	case "minlen", "maxlen":
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 || val != strconv.Itoa(n) {
			return fmt.Errorf("option %s needs a count (0, 1, 2, …), got %q", name, val)
		}
		if name == "minlen" {
			s.MinLength = &n
		} else {
			s.MaxLength = &n
		}
	case "enum":
		for v := range strings.SplitSeq(val, "|") {
			if v == "" {
				return fmt.Errorf("option enum has an empty value in %q", val)
			}
			if slices.Contains(s.Enum, any(v)) {
				return fmt.Errorf("option enum lists %q twice", v)
			}
			s.Enum = append(s.Enum, v)
		}
	case "pattern":
		if val == "" {
			return fmt.Errorf("option pattern needs a regular expression")
		}
		if _, err := regexp.Compile(val); err != nil {
			return fmt.Errorf("option pattern: %w", err)
		}
		s.Pattern = val
	}
	return nil
}

// compile turns the published schema into the validator.
func compile(s *jsonschema.Schema, published json.RawMessage) (*objectSchema, error) {
	o := &objectSchema{props: map[string]*prop{}, published: published}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	for name, ps := range s.Properties {
		p := &prop{name: name, typ: ps.Type, required: required[name], minLen: ps.MinLength, maxLen: ps.MaxLength,
			min: ps.Minimum, max: ps.Maximum, isKey: name == keyField || name == core.ConfirmField}
		if ps.Pattern != "" {
			re, err := regexp.Compile(ps.Pattern)
			if err != nil {
				return nil, err
			}
			p.pattern = re
			p.patHint = patternHint(ps.Pattern)
		}
		for _, e := range ps.Enum {
			p.enum = append(p.enum, fmt.Sprint(e))
		}
		o.props[name] = p
		o.order = append(o.order, name)
	}
	sort.Strings(o.order)
	return o, nil
}

func patternHint(pattern string) string {
	switch pattern {
	case idPattern:
		return "must be " + vocab.IDRule
	case currencyPattern:
		return "must be a lowercase ISO 4217 code such as usd"
	}
	return "must match " + pattern
}

// validate checks decoded arguments (strings, json.Number, bools, maps,
// slices from core.DecodeArgs).
func (o *objectSchema) validate(args map[string]any) error {
	unknown := []string{}
	for name := range args {
		if _, ok := o.props[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return vocab.Errorf(vocab.CodeInvalidArgument, unknown[0], "unknown argument (this tool takes %s)", strings.Join(o.order, ", "))
	}
	for _, name := range o.order {
		p := o.props[name]
		v, present := args[name]
		if !present {
			// A missing key has the gate's own code.
			if p.required && !p.isKey {
				return vocab.Errorf(vocab.CodeInvalidArgument, name, "is required")
			}
			continue
		}
		if err := p.check(v); err != nil {
			return err
		}
	}
	return nil
}

func (p *prop) check(v any) error {
	if p.isKey {
		// The gate checks a string key (and a confirmation) with its own
		// codes.
		if _, ok := v.(string); !ok && p.name == core.ConfirmField {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be the operation_id (a UUID) that a possible_duplicate answer named")
		} else if !ok {
			return vocab.Errorf(vocab.CodeInvalidIdempotencyKey, p.name, "must be a string")
		}
		return nil
	}
	switch p.typ {
	case "string":
		s, ok := v.(string)
		if !ok {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be a string")
		}
		// Postgres refuses U+0000 in text and jsonb: the claim could not be
		// stored.
		if strings.IndexByte(s, 0) >= 0 {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must not contain NUL (U+0000)")
		}
		n := utf8.RuneCountInString(s)
		if p.maxLen != nil && n > *p.maxLen {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be at most %d characters", *p.maxLen)
		}
		if p.minLen != nil && n < *p.minLen {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be at least %d characters", *p.minLen)
		}
		if p.pattern != nil && !p.pattern.MatchString(s) {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "%s, got %q", p.patHint, clip(s))
		}
		if len(p.enum) > 0 && !contains(p.enum, s) {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be one of %s, got %q", strings.Join(p.enum, ", "), clip(s))
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be a%s", article(p.typ))
		}
		// Exact: never through float64, where 99.99999999999999999 is 100.
		r, ok := new(big.Rat).SetString(string(n))
		if !ok {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be a%s, got %s", article(p.typ), clip(string(n)))
		}
		if p.typ == "integer" && !r.IsInt() {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be an integer, got %s", clip(string(n)))
		}
		if p.min != nil && r.Cmp(new(big.Rat).SetFloat64(*p.min)) < 0 {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be at least %s, got %s", fmtNum(*p.min), clip(string(n)))
		}
		if p.max != nil && r.Cmp(new(big.Rat).SetFloat64(*p.max)) > 0 {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be at most %s, got %s", fmtNum(*p.max), clip(string(n)))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return vocab.Errorf(vocab.CodeInvalidArgument, p.name, "must be true or false")
		}
	}
	return nil
}

func article(typ string) string {
	if typ == "integer" {
		return "n integer"
	}
	return " number"
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	n := 64
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
