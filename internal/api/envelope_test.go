package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
)

// envelopeCases are bodies and the code readEnvelope answers them with
// (0: accepted).
var envelopeCases = []struct {
	name string
	body string
	code int64
}{
	{"ToolCall", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":1,"b":[{"a":1},{"a":2}]}}}`, 0},
	{"TaskCall", `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{},"task":{"ttl":1}}}`, 0},
	{"Notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, 0},
	{"Response", `{"jsonrpc":"2.0","id":1,"result":{}}`, 0},
	{"ErrorResponseNullID", `{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`, 0},
	{"OtherMemberOrder", `{"method":"tools/call","params":{"arguments":{},"name":"x"},"jsonrpc":"2.0","id":-7}`, 0},
	{"ExtraMember", `{"jsonrpc":"2.0","id":1,"method":"ping","extra":{"a":1}}`, 0},
	{"IDMaxSafe", `{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`, 0},
	{"EscapedNames", `{"jsonrpc":"2.0","id":1,"m\u0065thod":"ping"}`, 0},
	{"SurrogatePair", `{"jsonrpc":"2.0","id":"\ud83d\ude00","method":"ping"}`, 0},
	// Inside the arguments the tool's decoder decides, with its code, the
	// field and a denied audit row.
	{"DuplicateInsideArguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":1,"a":2,"A":3}}}`, 0},
	{"NumberOverflowInArguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":1e400}}}`, 0},
	// Elsewhere an "arguments" member is no tool's.
	{"ArgumentsOfAnotherMethod", `{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"x","arguments":{"a":1,"a":2}}}`, jsonrpc.CodeInvalidParams},

	{"Empty", ``, jsonrpc.CodeParseError},
	{"Malformed", `{"jsonrpc":"2.0","id":1,"method":`, jsonrpc.CodeParseError},
	{"Trailing", `{"jsonrpc":"2.0","id":1,"method":"ping"}{}`, jsonrpc.CodeParseError},
	{"InvalidUTF8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}", jsonrpc.CodeParseError},
	{"Batch", ` [{"jsonrpc":"2.0","id":1,"method":"ping"}]`, jsonrpc.CodeInvalidRequest},
	{"NotAnObject", `"ping"`, jsonrpc.CodeInvalidRequest},
	{"TooDeep", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":` + strings.Repeat(`[`, 1000) + strings.Repeat(`]`, 1000) + `}}`, jsonrpc.CodeInvalidRequest},
	{"JSONRPCMissing", `{"id":1,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"JSONRPC1", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"JSONRPCNumber", `{"jsonrpc":2.0,"id":1,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDNull", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDBool", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDObject", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDArray", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDFraction", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDIntegralFraction", `{"jsonrpc":"2.0","id":1.0,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDExponent", `{"jsonrpc":"2.0","id":1e2,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDNegativeZero", `{"jsonrpc":"2.0","id":-0,"method":"ping"}`, 0},
	{"IDBeyond2To53", `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDOverflow", `{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"IDLoneSurrogate", `{"jsonrpc":"2.0","id":"\ud800","method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"MethodNumber", `{"jsonrpc":"2.0","id":1,"method":1}`, jsonrpc.CodeInvalidRequest},
	{"MethodAndResult", `{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}`, jsonrpc.CodeInvalidRequest},
	{"NeitherMethodNorResult", `{"jsonrpc":"2.0","id":1}`, jsonrpc.CodeInvalidRequest},
	{"MethodInOtherCase", `{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"name":"x","arguments":{}}}`, jsonrpc.CodeInvalidRequest},
	{"TopLevelDuplicate", `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"MethodSmuggled", `{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call","params":{"name":"refund_order","arguments":{}}}`, jsonrpc.CodeInvalidRequest},
	{"MethodEscapedTwice", `{"jsonrpc":"2.0","id":1,"method":"ping","m\u0065thod":"tools/call"}`, jsonrpc.CodeInvalidRequest},
	{"KelvinSign", `{"jsonrpc":"2.0","id":1,"method":"ping","x\u212a":1,"xk":2}`, jsonrpc.CodeInvalidRequest},
	{"LongS", `{"jsonrpc":"2.0","id":1,"method":"ping","\u017f":1,"S":2}`, jsonrpc.CodeInvalidRequest},
	{"NameLoneSurrogate", `{"jsonrpc":"2.0","id":1,"method":"ping","\udc00":1}`, jsonrpc.CodeInvalidRequest},
	{"ManyMembersDuplicate", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{` + manyMembers + `,"m3":0}}`, jsonrpc.CodeInvalidParams},
	{"ManyMembersKelvinSign", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{` + manyMembers + `,"x\u212a":1,"XK":2}}`, jsonrpc.CodeInvalidParams},
	{"ManyMembers", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{` + manyMembers + `,"x\u212a":1,"y":2}}`, 0},
	{"DuplicateInResult", `{"jsonrpc":"2.0","id":1,"result":{"a":1,"a":2}}`, jsonrpc.CodeInvalidRequest},
	{"ArgumentsSmuggled", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":{"amount_cents":1},"Arguments":{"amount_cents":77777}}}`, jsonrpc.CodeInvalidParams},
	{"ArgumentsInOtherCase", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","Arguments":{"amount_cents":77777}}}`, jsonrpc.CodeInvalidParams},
	{"ArgumentsTwice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":{},"arguments":{}}}`, jsonrpc.CodeInvalidParams},
	{"NameSmuggled", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order","NAME":"refund_order","arguments":{}}}`, jsonrpc.CodeInvalidParams},
	{"NameEscapedTwice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order","n\u0061me":"refund_order","arguments":{}}}`, jsonrpc.CodeInvalidParams},
	{"TaskInOtherCase", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"Task":{}}}`, jsonrpc.CodeInvalidParams},
	{"DuplicateInTask", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"task":{"ttl":1,"TTL":2}}}`, jsonrpc.CodeInvalidParams},
	{"DuplicateInMeta", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"a":{"y":1,"y":2}}}}`, jsonrpc.CodeInvalidParams},
	{"DuplicateInOtherParams", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{},"Capabilities":{}}}`, jsonrpc.CodeInvalidParams},
	{"LoneSurrogateInName", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x\ud800","arguments":{}}}`, jsonrpc.CodeInvalidParams},
}

// manyMembers are more members than nameSet keeps in place.
var manyMembers = func() string {
	m := make([]string, 2*nameSetLinear)
	for i := range m {
		m[i] = fmt.Sprintf(`"m%d":%d`, i, i)
	}
	return strings.Join(m, ",")
}()

func TestFoldNameAgreesWithEqualFold(t *testing.T) {
	t.Parallel()
	for r := rune(0); r < 0x20000; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		a := utf8.AppendRune(nil, r)
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			b := utf8.AppendRune(nil, f)
			require.True(t, bytes.EqualFold(a, b))
			require.Equal(t, string(foldName(a)), string(foldName(b)), "%U and %U", r, f)
		}
		if r < 0x80 {
			require.Equal(t, strings.ToLower(string(a)), string(foldName(a)))
		}
	}
}

func TestReadEnvelope(t *testing.T) {
	t.Parallel()
	for _, tc := range envelopeCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, err := readEnvelope([]byte(tc.body))
			if tc.code == 0 {
				require.Nil(t, err)
				require.NotNil(t, env)
				return
			}
			require.NotNil(t, err, "accepted")
			require.Equal(t, tc.code, err.code, err.msg)
		})
	}
}

func TestReadEnvelopeReadsTheCall(t *testing.T) {
	t.Parallel()
	env, err := readEnvelope([]byte(` {"params":{"task":{"ttl":5},"_meta":{"k":"v"},"arguments": {"a":1} ,"name":"refund_order"},"method":"tools/call","id":"x-1","jsonrpc":"2.0"} `))
	require.Nil(t, err)
	require.Equal(t, "tools/call", env.method)
	require.Equal(t, `"x-1"`, string(env.id))
	require.False(t, env.extra)
	require.Equal(t, "refund_order", env.call.name)
	require.Equal(t, `{"a":1}`, string(env.call.args))
	require.Equal(t, `{"k":"v"}`, string(env.call.meta))
	require.True(t, env.call.isTask())

	env, err = readEnvelope([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"task":null}}`))
	require.Nil(t, err)
	require.False(t, env.call.isTask(), "task null is a plain call")
}

func TestRefusalNamesTheID(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":"a\u0041","method":"tools/call","params":{"name":"x","NAME":"y"}}`: `{"jsonrpc":"2.0","id":"aA","error":{"code":-32602,"message":"invalid message: the members \"name\" and \"NAME\" differ only in case (params); member names are case-sensitive"}}`,
		`{"jsonrpc":"2.0","id":7,"method":"ping","METHOD":"x"}`:                                   `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"invalid message: the members \"method\" and \"METHOD\" differ only in case (the message); member names are case-sensitive"}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","Params":{}}`:                              `{"jsonrpc":"2.0","id":8,"error":{"code":-32600,"message":"invalid message: \"Params\" is not the member \"params\" (the message); member names are case-sensitive"}}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`:                                         `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid message: the member \"id\" appears twice in one object (the message)"}}`,
		`{"jsonrpc":"2.0","id":true,"method":"ping"}`:                                             `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: the id must be a string or a number"}}`,
		`[]`: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"JSON-RPC batches are not accepted: send one request per HTTP request"}}`,
	} {
		_, err := readEnvelope([]byte(body))
		require.NotNil(t, err, body)
		rec := httptest.NewRecorder()
		writeEnvelopeError(rec, http.StatusBadRequest, err)
		require.Equal(t, want, rec.Body.String(), body)
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	}
}

// FuzzReadEnvelope checks readEnvelope against a strict reading of its own
// (strictReading, on encoding/json's tokens): it never accepts a body that
// reading refuses. What it accepts, Go's case-insensitive decoder and the
// SDK's reader read as it does: the same method, id, tool name, arguments
// and task. It never panics.
func FuzzReadEnvelope(f *testing.F) {
	for _, tc := range envelopeCases {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"progressToken":1}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"\u00e9\n","method":"a\"b"}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":0,"method":"tools/call","params":[{"a":1,"A":1}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, rerr := readEnvelope(body)
		want, werr := strictReading(body)
		if rerr != nil {
			require.Nil(t, env)
			require.Contains(t, []int64{jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeInvalidParams}, rerr.code)
			return
		}
		require.NoError(t, werr, "accepted a body the strict reading refuses: %q", body)
		require.Equal(t, want.method, env.method, "method of %q", body)
		require.Equal(t, want.id, string(env.id), "id of %q", body)

		// Go's decoder, which matches names without regard to case and
		// keeps the last, reads the same.
		var std struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		require.NoError(t, json.Unmarshal(body, &std), "%q", body)
		require.Equal(t, env.method, std.Method)
		if string(std.ID) == "null" {
			std.ID = nil
		}
		require.Equal(t, compactJSON(env.id), compactJSON(std.ID))
		if env.call != nil {
			var p struct {
				Name      json.RawMessage `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
				Task      json.RawMessage `json:"task"`
			}
			require.NoError(t, json.Unmarshal(std.Params, &p))
			require.Equal(t, compactJSON(env.call.nameRaw), compactJSON(p.Name))
			require.Equal(t, compactJSON(env.call.args), compactJSON(p.Arguments))
			require.Equal(t, compactJSON(env.call.task), compactJSON(p.Task))
		}
		// So does the SDK's.
		if env.hasMethod {
			msg, err := jsonrpc.DecodeMessage(body)
			require.NoError(t, err, "%q", body)
			req, ok := msg.(*jsonrpc.Request)
			require.True(t, ok)
			require.Equal(t, env.method, req.Method)
			require.Equal(t, env.id != nil, req.ID.IsValid())
		}
	})
}

func compactJSON(v []byte) string {
	if v == nil {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return "invalid: " + string(v)
	}
	return b.String()
}

// reading is what strictReading reads of a message.
type reading struct {
	method string
	id     string // raw; "" when absent or null
}

// strictReading reads a JSON-RPC message by the rules of envelope.go,
// written apart from readEnvelope: on encoding/json's token stream, with
// strings.EqualFold for case.
func strictReading(body []byte) (reading, error) {
	var r reading
	if len(body) == 0 || !utf8.Valid(body) || !json.Valid(body) {
		return r, errors.New("not one JSON value in UTF-8")
	}
	if bytes.TrimLeft(body, " \t\r\n")[0] != '{' {
		return r, errors.New("not an object")
	}
	// The exact member "method", if any, decides where the arguments are.
	method, isCall := "", false
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	members, err := topMembers(body)
	if err != nil {
		return r, err
	}
	if m, ok := members["method"]; ok {
		if err := json.Unmarshal(m, &method); err != nil {
			return r, errors.New("method is not a string")
		}
		isCall = method == "tools/call"
	}
	if err := walk(dec, "", isCall, 1); err != nil {
		return r, err
	}
	var version string
	if json.Unmarshal(members["jsonrpc"], &version) != nil || version != "2.0" {
		return r, errors.New(`jsonrpc is not "2.0"`)
	}
	_, hasMethod := members["method"]
	_, hasResult := members["result"]
	_, hasError := members["error"]
	if hasMethod && (hasResult || hasError) || !hasMethod && hasResult == hasError {
		return r, errors.New("neither a request nor a response")
	}
	if id, ok := members["id"]; ok {
		var v any
		d := json.NewDecoder(bytes.NewReader(id))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return r, err
		}
		switch v := v.(type) {
		case string:
			r.id = string(id)
		case json.Number:
			n, err := v.Int64()
			if err != nil || strings.ContainsAny(v.String(), ".eE") || n > 1<<53 || -n > 1<<53 {
				return r, errors.New("id is not an integer literal of at most 2^53")
			}
			r.id = string(id)
		case nil:
			if hasMethod {
				return r, errors.New("a request's id is null")
			}
		default:
			return r, errors.New("id is not a string or a number")
		}
	}
	r.method = method
	return r, nil
}

// topMembers are the top-level members by exact name (the last of each).
func topMembers(body []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out[tok.(string)] = v
	}
	return out, nil
}

// walk reads one value: objects may not have two names equal but for
// case, nor a protocol member's name in other case; nesting is at most
// maxEnvelopeDepth. Inside a tool call's arguments names are the tool's.
func walk(dec *json.Decoder, path string, isCall bool, level int) error {
	if level > 1000 {
		return errors.New("too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	inArguments := isCall && (path == "/params/arguments" || strings.HasPrefix(path, "/params/arguments/"))
	var known []string
	switch {
	case path == "":
		known = []string{"jsonrpc", "id", "method", "params", "result", "error"}
	case isCall && path == "/params":
		known = []string{"name", "arguments", "_meta", "task"}
	}
	var names []string
	for dec.More() {
		child := path
		if delim == '{' {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			name := tok.(string)
			if !inArguments {
				for _, n := range slices.Concat(names, known) {
					if strings.EqualFold(n, name) && (n != name || slices.Contains(names, name)) {
						return fmt.Errorf("%q and %q in %s", n, name, path)
					}
				}
			}
			names = append(names, name)
			child = path + "/" + name
		} else {
			child = path + "/[]"
		}
		if err := walk(dec, child, isCall, level+1); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
