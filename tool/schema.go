package tool

import (
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/gate"
)

// Argument constraints shared by the built-in tools, for the idem struct
// tag's short forms.
const (
	// idPattern is what ids (orders, customers, seats, users) look like:
	// the tag `idem:"id"`.
	idPattern = domain.IDPattern
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
const keyDescription = "Client-chosen key, 8 to 128 characters of [A-Za-z0-9._:-]. Retrying with the same key and arguments returns the first outcome; never reuse a key for another intent."

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
// constraints of `idem` tags, and for a mutation the idempotency key.
func inputSchema[A any](mutating bool) (*objectSchema, error) {
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
		if name == keyField && mutating {
			return nil, fmt.Errorf("field %s: %s is added by idemgate; do not declare it", f.Name, keyField)
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
			Type: "string", MinLength: ptr(gate.KeyMinLen), MaxLength: ptr(gate.KeyMaxLen),
			Pattern: "^[A-Za-z0-9._:-]+$", Description: keyDescription,
		}
		s.Required = append(s.Required, keyField)
		s.PropertyOrder = append(s.PropertyOrder, keyField)
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
	op, err := jsonschema.For[domain.Operation](&jsonschema.ForOptions{TypeSchemas: typeSchemas})
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

// applyTag adds the constraints of an idem tag: id, currency, text, cents,
// min=N, max=N, minlen=N, maxlen=N, enum=a|b, and pattern=RE (last: the
// pattern runs to the end of the tag).
func applyTag(s *jsonschema.Schema, tag string) error {
	for tag != "" {
		var part string
		if strings.HasPrefix(tag, "pattern=") {
			part, tag = tag, ""
		} else {
			part, tag, _ = strings.Cut(tag, ",")
		}
		key, val, hasVal := strings.Cut(part, "=")
		num := func() (float64, error) {
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || !hasVal {
				return 0, fmt.Errorf("idem tag %s needs a number, got %q", key, val)
			}
			return f, nil
		}
		switch key {
		case "id":
			s.Pattern = idPattern
		case "currency":
			s.Pattern = currencyPattern
		case "text":
			s.MaxLength = ptr(maxTextLen)
		case "cents":
			s.Minimum, s.Maximum = ptr(1.0), ptr(float64(maxAmountCents))
		case "min", "max":
			f, err := num()
			if err != nil {
				return err
			}
			if key == "min" {
				s.Minimum = &f
			} else {
				s.Maximum = &f
			}
		case "minlen", "maxlen":
			f, err := num()
			if err != nil {
				return err
			}
			if key == "minlen" {
				s.MinLength = ptr(int(f))
			} else {
				s.MaxLength = ptr(int(f))
			}
		case "enum":
			for v := range strings.SplitSeq(val, "|") {
				s.Enum = append(s.Enum, v)
			}
		case "pattern":
			if _, err := regexp.Compile(val); err != nil {
				return fmt.Errorf("idem tag pattern: %w", err)
			}
			s.Pattern = val
		default:
			return fmt.Errorf("unknown idem tag %q", part)
		}
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
			min: ps.Minimum, max: ps.Maximum, isKey: name == keyField}
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
		return "must be " + domain.IDRule
	case currencyPattern:
		return "must be a lowercase ISO 4217 code such as usd"
	}
	return "must match " + pattern
}

// validate checks decoded arguments (strings, json.Number, bools, maps,
// slices from gate.DecodeArgs).
func (o *objectSchema) validate(args map[string]any) error {
	unknown := []string{}
	for name := range args {
		if _, ok := o.props[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return domain.Errorf(domain.CodeInvalidArgument, unknown[0], "unknown argument (this tool takes %s)", strings.Join(o.order, ", "))
	}
	for _, name := range o.order {
		p := o.props[name]
		v, present := args[name]
		if !present {
			// A missing key has the gate's own code.
			if p.required && !p.isKey {
				return domain.Errorf(domain.CodeInvalidArgument, name, "is required")
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
		// The gate checks a string key with its own codes.
		if _, ok := v.(string); !ok {
			return domain.Errorf(domain.CodeInvalidIdempotencyKey, p.name, "must be a string")
		}
		return nil
	}
	switch p.typ {
	case "string":
		s, ok := v.(string)
		if !ok {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be a string")
		}
		// Postgres refuses U+0000 in text and jsonb: the claim could not be
		// stored.
		if strings.IndexByte(s, 0) >= 0 {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must not contain NUL (U+0000)")
		}
		n := utf8.RuneCountInString(s)
		if p.maxLen != nil && n > *p.maxLen {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be at most %d characters", *p.maxLen)
		}
		if p.minLen != nil && n < *p.minLen {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be at least %d characters", *p.minLen)
		}
		if p.pattern != nil && !p.pattern.MatchString(s) {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "%s, got %q", p.patHint, clip(s))
		}
		if len(p.enum) > 0 && !contains(p.enum, s) {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be one of %s, got %q", strings.Join(p.enum, ", "), clip(s))
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be a%s", article(p.typ))
		}
		// Exact: never through float64, where 99.99999999999999999 is 100.
		r, ok := new(big.Rat).SetString(string(n))
		if !ok {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be a%s, got %s", article(p.typ), clip(string(n)))
		}
		if p.typ == "integer" && !r.IsInt() {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be an integer, got %s", clip(string(n)))
		}
		if p.min != nil && r.Cmp(new(big.Rat).SetFloat64(*p.min)) < 0 {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be at least %s, got %s", fmtNum(*p.min), clip(string(n)))
		}
		if p.max != nil && r.Cmp(new(big.Rat).SetFloat64(*p.max)) > 0 {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be at most %s, got %s", fmtNum(*p.max), clip(string(n)))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return domain.Errorf(domain.CodeInvalidArgument, p.name, "must be true or false")
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
