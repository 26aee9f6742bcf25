package gate

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/require"
)

// tagged applies tag to a fresh schema of type typ and returns the schema
// as published (its JSON).
func tagged(typ, tag string) (string, error) {
	s := &jsonschema.Schema{Type: typ}
	if err := applyTag(s, tag); err != nil {
		return "", err
	}
	b, err := json.Marshal(s)
	return string(b), err
}

func TestIdemTag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, typ, tag string
		schema         string // the published schema, when the tag is accepted
		err            string // part of the error, when it is refused
	}{
		{"Empty", "string", "", `{"type":"string"}`, ""},
		{"ID", "string", "id", `{"type":"string","pattern":"` + strings.ReplaceAll(idPattern, `\`, `\\`) + `"}`, ""},
		{"Currency", "string", "currency", `{"type":"string","pattern":"^[a-z]{3}$"}`, ""},
		{"Text", "string", "text", `{"type":"string","maxLength":500}`, ""},
		{"Cents", "integer", "cents", `{"type":"integer","minimum":1,"maximum":1000000000}`, ""},
		{"MinMax", "integer", "min=1,max=100", `{"type":"integer","minimum":1,"maximum":100}`, ""},
		{"MinMaxNumber", "number", "min=-0.5,max=2.5", `{"type":"number","minimum":-0.5,"maximum":2.5}`, ""},
		{"Lengths", "string", "minlen=3,maxlen=8", `{"type":"string","minLength":3,"maxLength":8}`, ""},
		{"TextAndMinlen", "string", "minlen=1,text", `{"type":"string","minLength":1,"maxLength":500}`, ""},
		{"Enum", "string", "enum=queued|running", `{"type":"string","enum":["queued","running"]}`, ""},
		{"PatternLast", "string", "minlen=3,pattern=^[a-z0-9-]+$", `{"type":"string","minLength":3,"pattern":"^[a-z0-9-]+$"}`, ""},
		{"PatternWithCommas", "string", "maxlen=20,pattern=^[a-z]{1,3}(,[a-z]{1,3})*$", `{"type":"string","maxLength":20,"pattern":"^[a-z]{1,3}(,[a-z]{1,3})*$"}`, ""},
		{"PatternCommaNotAnOption", "string", "pattern=^a,b$", `{"type":"string","pattern":"^a,b$"}`, ""},
		{"PatternCommaIDLike", "string", "pattern=^(x,id|y)$", `{"type":"string","pattern":"^(x,id|y)$"}`, ""},
		{"PatternWithEquals", "string", "pattern=^a=b$", `{"type":"string","pattern":"^a=b$"}`, ""},

		// The reported bug: the option after the pattern was swallowed
		// into it, and no call ever matched.
		{"OptionAfterPattern", "string", "pattern=^[a-z0-9-]+$,minlen=3", "", `pattern must be the last option (its value runs to the end of the tag), but ",minlen=3" follows it and reads as an option: write "minlen=3,pattern=^[a-z0-9-]+$"`},
		{"BareOptionAfterPattern", "string", "pattern=^[a-z]+$,text", "", `",text" follows it`},
		{"OptionAfterCommaInPattern", "string", "pattern=^a,b$,maxlen=9", "", `write "maxlen=9,pattern=^a,b$"`},
		{"Unknown", "string", "lowercase", "", `unknown option "lowercase"`},
		{"UnknownWithValue", "string", "minlength=3", "", `unknown option "minlength"`},
		{"Uppercase", "string", "ID", "", `unknown option "ID"`},
		{"EmptyOption", "string", "id,,text", "", "empty option"},
		{"TrailingComma", "string", "text,", "", "empty option"},
		{"Spaces", "string", "id, text", "", `unknown option " text"`},
		{"BareWithValue", "string", "text=100", "", "option text takes no value"},
		{"ValueMissing", "string", "maxlen", "", "option maxlen needs a value"},
		{"Twice", "string", "minlen=1,minlen=2", "", "option minlen appears twice"},
		{"IDAndPattern", "string", "id,pattern=^x$", "", "options id and pattern both set the pattern"},
		{"TextAndMaxlen", "string", "text,maxlen=9", "", "options text and maxlen both set the maxLength"},
		{"CentsAndMin", "integer", "cents,min=5", "", "options cents and min both set the minimum"},
		{"MinAboveMax", "integer", "min=10,max=1", "", "min=10 exceeds max=1"},
		{"MinlenAboveMaxlen", "string", "minlen=9,maxlen=3", "", "minlen=9 exceeds the longest length, 3"},
		{"MinlenAboveText", "string", "minlen=501,text", "", "minlen=501 exceeds the longest length, 500"},
		{"MinNotANumber", "integer", "min=one", "", `option min needs a finite number, got "one"`},
		{"MinNaN", "number", "min=NaN", "", "finite number"},
		{"MaxInf", "number", "max=+Inf", "", "finite number"},
		{"MaxlenFraction", "string", "maxlen=3.5", "", `option maxlen needs a count (0, 1, 2, …), got "3.5"`},
		{"MaxlenNegative", "string", "maxlen=-1", "", "needs a count"},
		{"MaxlenPlus", "string", "maxlen=+3", "", "needs a count"},
		{"EnumEmptyValue", "string", "enum=a||b", "", "option enum has an empty value"},
		{"EnumNothing", "string", "enum=", "", "option enum has an empty value"},
		{"EnumTwice", "string", "enum=a|a", "", `option enum lists "a" twice`},
		{"PatternEmpty", "string", "pattern=", "", "option pattern needs a regular expression"},
		{"PatternInvalid", "string", "pattern=^[a-z$", "", "option pattern: error parsing regexp"},
		{"MinOnString", "string", "min=1", "", "option min applies to integer or number arguments; this one is string"},
		{"PatternOnInteger", "integer", "pattern=^1$", "", "option pattern applies to string arguments; this one is integer"},
		{"CentsOnNumber", "number", "cents", "", "option cents applies to integer arguments; this one is number"},
		{"TextOnBoolean", "boolean", "text", "", "this one is boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tagged(tc.typ, tc.tag)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.ErrorContains(t, err, "idem:"+strconv.Quote(tc.tag), "the error names the tag")
				return
			}
			require.NoError(t, err)
			require.JSONEq(t, tc.schema, got)
		})
	}
}

// FuzzIdemTag: no tag makes the parser panic; an accepted tag gives a
// schema that publishes and compiles into a validator, and written back as
// a canonical tag it parses to the same schema.
func FuzzIdemTag(f *testing.F) {
	for _, seed := range []string{
		"", "id", "currency", "text", "cents", "min=1,max=100", "min=-0.5", "minlen=3,maxlen=8",
		"enum=queued|running|succeeded|failed", "maxlen=200", "minlen=3,pattern=^[a-z0-9-]+$",
		"pattern=^[a-z0-9-]+$,minlen=3", "pattern=^a,b$", "pattern=^(x,id|y)$", "id,,text", "text,",
		"min=NaN", "maxlen=3.5", "enum=a||b", "pattern=^[a-z$", "pattern=", "cents,min=5",
	} {
		for _, typ := range []string{"string", "integer", "number", "boolean"} {
			f.Add(typ, seed)
		}
	}
	f.Fuzz(func(t *testing.T, typ, tag string) {
		s := &jsonschema.Schema{Type: typ}
		if err := applyTag(s, tag); err != nil {
			require.ErrorContains(t, err, "idem:"+strconv.Quote(tag))
			return
		}
		published, err := json.Marshal(s)
		require.NoError(t, err)
		obj := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"a": s}}
		_, err = compile(obj, published)
		require.NoError(t, err, "tag %q", tag)

		again := &jsonschema.Schema{Type: typ}
		require.NoError(t, applyTag(again, canonicalTag(s)), "tag %q as %q", tag, canonicalTag(s))
		republished, err := json.Marshal(again)
		require.NoError(t, err)
		require.JSONEq(t, string(published), string(republished), "tag %q as %q", tag, canonicalTag(s))
	})
}

// canonicalTag writes s's constraints as an idem tag, pattern last.
func canonicalTag(s *jsonschema.Schema) string {
	var opts []string
	if s.Minimum != nil {
		opts = append(opts, "min="+fmtNum(*s.Minimum))
	}
	if s.Maximum != nil {
		opts = append(opts, "max="+fmtNum(*s.Maximum))
	}
	if s.MinLength != nil {
		opts = append(opts, "minlen="+strconv.Itoa(*s.MinLength))
	}
	if s.MaxLength != nil {
		opts = append(opts, "maxlen="+strconv.Itoa(*s.MaxLength))
	}
	if len(s.Enum) > 0 {
		vals := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			vals[i] = v.(string)
		}
		opts = append(opts, "enum="+strings.Join(vals, "|"))
	}
	if s.Pattern != "" {
		opts = append(opts, "pattern="+s.Pattern)
	}
	return strings.Join(opts, ",")
}
