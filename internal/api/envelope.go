package api

// Partly a shim: the one strict reading of a POST's body that the fast
// path, the task layer and the SDK all act on. It is needed as long as any
// layer here reads the body besides the SDK: delete it with the fast path
// and the task layer (see their files), once the SDK's decoder is the only
// reader; what it refuses beyond that (duplicate or case-folded member
// names, lone surrogates) would then have to be the SDK's own strictness.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A POST to /mcp carries one JSON-RPC message, and every path that acts on
// it (the fast path, the task layer, the SDK behind them) acts on the one
// reading readEnvelope makes, before any of them runs. A body two decoders
// read differently (Go's encoding/json matches member names without regard
// to case and keeps the last of two; the SDK's decoder is case-sensitive)
// could be logged, allowed or proxied as one call and executed as another,
// so readEnvelope refuses it, with a JSON-RPC error and nothing written:
//   - a body that is not one JSON value in UTF-8 (-32700 parse error);
//   - a batch, a value other than an object, nesting deeper than the SDK
//     reads (-32600 invalid request);
//   - in any object outside the tool's arguments, a member name twice, or
//     two names equal but for case, or a name that is a protocol member's
//     (jsonrpc, id, method, params, result, error; in tools/call params:
//     name, arguments, _meta, task) in other case; an escaped lone
//     surrogate in a name or a string (decoders replace it with U+FFFD):
//     -32600 in the envelope, -32602 inside params;
//   - jsonrpc other than the string "2.0"; an id that is not a string or
//     an integer literal of at most 2^53 in magnitude (the SDK reads
//     numbers as float64 and answers with int64(id): 1.5 would come back
//     as 1); a method that is not a string; a message with both or neither
//     of a method and a result or error (-32600).
//
// The tool's arguments (params.arguments of tools/call) are left to the
// tool's own strict decoder (core.DecodeArgs), which every path runs and
// which refuses a member twice at any depth, unknown members and inexact
// numbers with our code, the field and a denied audit row.

// maxEnvelopeDepth is the deepest nesting the SDK's decoder reads.
const maxEnvelopeDepth = 1000

// maxEnvelopeID is the largest magnitude of a numeric id: the SDK reads
// ids as float64, exact up to 2^53.
const maxEnvelopeID = 1 << 53

// Method names the layers in front of the SDK act on.
const (
	methodToolsCall  = "tools/call"
	methodInitialize = "initialize"
	methodToolsList  = "tools/list"
	methodDiscover   = "server/discover"
)

// envelope is a JSON-RPC message as readEnvelope read it. Raw values are
// slices of the body.
type envelope struct {
	// id is the raw JSON id; nil when the message has none.
	id []byte
	// method is the request's method; "" for a response (hasMethod false).
	method    string
	hasMethod bool
	// params is the raw params value; nil when absent.
	params []byte
	// extra reports members other than jsonrpc, id, method and params.
	extra bool
	// escaped reports an escape sequence in a member name outside the
	// arguments, or in params.name.
	escaped bool
	// call is what a tools/call request with object params carries; nil
	// for other messages.
	call *callParams
}

// callParams are the params of a tools/call as readEnvelope read them.
type callParams struct {
	// name is params.name decoded, when it is a string.
	name    string
	nameRaw []byte
	// args, meta and task are the raw values of params.arguments,
	// params._meta and params.task; nil when absent.
	args, meta, task []byte
	// extra reports members other than name, arguments, _meta and task.
	extra bool
}

// isTask reports whether the call is task-augmented: params.task is
// present and not null.
func (c *callParams) isTask() bool {
	return c != nil && c.task != nil && string(c.task) != "null"
}

// envelopeError is readEnvelope's refusal: the JSON-RPC error to answer.
type envelopeError struct {
	code int64
	msg  string
	// id is the request's id when it was read, else nil.
	id []byte
}

func (e *envelopeError) Error() string { return e.msg }

// errBatch is the refusal of a JSON-RPC batch: it would carry many tool
// calls (and their audit rows) in one HTTP request, around any per-request
// limit in front of the api.
var errBatch = errors.New("JSON-RPC batches are not accepted: send one request per HTTP request")

// The protocol's member names, by level.
var (
	envelopeMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}
	callMembers     = []string{"name", "arguments", "_meta", "task"}
)

// readEnvelope reads the body of a POST to /mcp, strictly (see above).
func readEnvelope(body []byte) (*envelope, *envelopeError) {
	if len(body) == 0 {
		return nil, &envelopeError{code: jsonrpc.CodeParseError, msg: "parse error: the body is empty"}
	}
	if !utf8.Valid(body) {
		return nil, &envelopeError{code: jsonrpc.CodeParseError, msg: "parse error: the body is not valid UTF-8"}
	}
	if !json.Valid(body) {
		var raw json.RawMessage
		msg := "parse error: the body is not one JSON value"
		if err := json.Unmarshal(body, &raw); err != nil {
			msg = "parse error: " + err.Error()
		}
		return nil, &envelopeError{code: jsonrpc.CodeParseError, msg: msg}
	}
	// From here on the body is one valid JSON value: the scanners below
	// rely on it.
	if depth(body) > maxEnvelopeDepth {
		return nil, &envelopeError{code: jsonrpc.CodeInvalidRequest, msg: fmt.Sprintf("invalid request: nested deeper than %d levels", maxEnvelopeDepth)}
	}
	i := skipSpace(body, 0)
	switch body[i] {
	case '{':
	case '[':
		return nil, &envelopeError{code: jsonrpc.CodeInvalidRequest, msg: errBatch.Error()}
	default:
		return nil, &envelopeError{code: jsonrpc.CodeInvalidRequest, msg: "invalid request: a JSON-RPC message is an object"}
	}

	// The members first, then the id (so that the refusals can name it),
	// then the names.
	type member struct {
		name    []byte
		escaped bool
		val     []byte
	}
	var buf [8]member
	members := buf[:0]
	if _, err := eachMember(body, i, jsonrpc.CodeInvalidRequest, func(name []byte, escaped bool, val []byte) *envelopeError {
		members = append(members, member{name, escaped, val})
		return nil
	}); err != nil {
		return nil, err
	}
	env := &envelope{}
	var jsonrpcVal, idVal, methodVal, resultVal, errorVal []byte
	var others [][]byte // values of unknown members, checked below
	for _, m := range members {
		if string(m.name) == "id" {
			if idVal != nil {
				idVal = nil // twice: no id to name
				break
			}
			idVal = m.val
		}
	}
	if idVal != nil && string(idVal) != "null" && checkID(idVal, false) == nil {
		env.id = idVal
	}
	var seen nameSet
	for _, m := range members {
		env.escaped = env.escaped || m.escaped
		if err := seen.add(m.name, "the message", envelopeMembers, jsonrpc.CodeInvalidRequest); err != nil {
			err.id = env.id
			return nil, err
		}
		switch string(m.name) {
		case "jsonrpc":
			jsonrpcVal = m.val
		case "id":
			idVal = m.val
		case "method":
			methodVal = m.val
		case "params":
			env.params = m.val
		case "result":
			resultVal = m.val
		case "error":
			errorVal = m.val
		default:
			env.extra = true
			others = append(others, m.val)
		}
	}
	if idVal != nil {
		if err := checkID(idVal, errorVal != nil && methodVal == nil); err != nil {
			return nil, err
		}
	}
	refuse := func(code int64, format string, args ...any) (*envelope, *envelopeError) {
		return nil, &envelopeError{code: code, msg: fmt.Sprintf(format, args...), id: env.id}
	}
	if s, ok := jsonBytes(jsonrpcVal); !ok || string(s) != "2.0" {
		return refuse(jsonrpc.CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	switch {
	case methodVal != nil:
		s, ok := jsonString(methodVal)
		if !ok {
			return refuse(jsonrpc.CodeInvalidRequest, `invalid request: "method" must be a string`)
		}
		if resultVal != nil || errorVal != nil {
			return refuse(jsonrpc.CodeInvalidRequest, `invalid request: a request has no "result" or "error"`)
		}
		env.method, env.hasMethod = s, true
	case (resultVal == nil) == (errorVal == nil):
		return refuse(jsonrpc.CodeInvalidRequest, `invalid request: a message has a "method", or one of "result" and "error"`)
	}
	for _, v := range append(others, resultVal, errorVal) {
		if v == nil {
			continue
		}
		if err := checkValue(v, "the message", jsonrpc.CodeInvalidRequest); err != nil {
			err.id = env.id
			return nil, err
		}
	}
	if env.params != nil {
		var err *envelopeError
		if env.method == methodToolsCall && env.params[0] == '{' {
			env.call, err = readCallParams(env, env.params)
		} else {
			err = checkValue(env.params, "params", jsonrpc.CodeInvalidParams)
		}
		if err != nil {
			err.id = env.id
			return nil, err
		}
	}
	return env, nil
}

// readCallParams reads the params object of a tools/call.
func readCallParams(env *envelope, params []byte) (*callParams, *envelopeError) {
	c := &callParams{}
	var seen nameSet
	_, err := eachMember(params, 0, jsonrpc.CodeInvalidParams, func(name []byte, escaped bool, val []byte) *envelopeError {
		env.escaped = env.escaped || escaped
		if err := seen.add(name, "params", callMembers, jsonrpc.CodeInvalidParams); err != nil {
			return err
		}
		if string(name) == "arguments" {
			c.args = val // the tool's decoder reads them
			return nil
		}
		if err := checkValue(val, "params", jsonrpc.CodeInvalidParams); err != nil {
			return err
		}
		switch string(name) {
		case "name":
			c.nameRaw = val
			if s, ok := jsonString(val); ok {
				c.name = s
				env.escaped = env.escaped || bytes.IndexByte(val, '\\') >= 0
			}
		case "_meta":
			c.meta = val
		case "task":
			c.task = val
		default:
			c.extra = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// checkID checks a JSON-RPC id: a string, or an integer literal the SDK
// answers with unchanged (no fraction, no exponent); null only in an error
// response.
func checkID(v []byte, nullOK bool) *envelopeError {
	bad := func(msg string) *envelopeError {
		return &envelopeError{code: jsonrpc.CodeInvalidRequest, msg: "invalid request: " + msg}
	}
	switch v[0] {
	case '"':
		if _, ok := jsonBytes(v); !ok {
			return bad("the id is not a valid string")
		}
		return nil
	case 'n':
		if nullOK {
			return nil
		}
		return bad("the id must be a string or a number, not null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n > maxEnvelopeID || n < -maxEnvelopeID {
			return bad(fmt.Sprintf("the id %s is not a string or an integer of at most 2^53 in magnitude", v))
		}
		return nil
	}
	return bad("the id must be a string or a number")
}

// checkValue checks the value v: see scanValue.
func checkValue(v []byte, where string, code int64) *envelopeError {
	_, err := scanValue(v, 0, where, code)
	return err
}

// scanValue checks the value at b[i] in one pass and returns the index
// after it: in every object at any depth, each member name once (by its
// case folding), and no escaped lone surrogate in any string. where names
// the value in messages; code is the JSON-RPC code of a refusal.
func scanValue(b []byte, i int, where string, code int64) (int, *envelopeError) {
	lone := func() *envelopeError {
		return &envelopeError{code: code, msg: fmt.Sprintf("invalid message: a string in %s holds an escaped lone surrogate", where)}
	}
	switch b[i] {
	case '"':
		end := stringEnd(b, i)
		if _, ok := jsonBytes(b[i:end]); !ok {
			return 0, lone()
		}
		return end, nil
	case '{':
		var seen nameSet
		i = skipSpace(b, i+1)
		if b[i] == '}' {
			return i + 1, nil
		}
		for {
			kEnd := stringEnd(b, i)
			name, ok := jsonBytes(b[i:kEnd])
			if !ok {
				return 0, lone()
			}
			if err := seen.add(name, where, nil, code); err != nil {
				return 0, err
			}
			i = skipSpace(b, kEnd)
			i = skipSpace(b, i+1) // the colon
			var err *envelopeError
			if i, err = scanValue(b, i, where, code); err != nil {
				return 0, err
			}
			i = skipSpace(b, i)
			if b[i] == '}' {
				return i + 1, nil
			}
			i = skipSpace(b, i+1) // the comma
		}
	case '[':
		i = skipSpace(b, i+1)
		if b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err *envelopeError
			if i, err = scanValue(b, i, where, code); err != nil {
				return 0, err
			}
			i = skipSpace(b, i)
			if b[i] == ']' {
				return i + 1, nil
			}
			i = skipSpace(b, i+1) // the comma
		}
	}
	return valueEnd(b, i), nil
}

// nameSet is the member names of one object seen so far: in place for a
// small object (compared with bytes.EqualFold, Unicode's simple case
// folding), beyond that indexed by their foldName.
type nameSet struct {
	n     int
	names [nameSetLinear][]byte
	index map[string][]byte // foldName → name
}

// nameSetLinear is the number of names nameSet keeps in place.
const nameSetLinear = 16

// add refuses a name seen before, one equal but for case to a name seen
// before, and one equal but for case to a protocol member of the object
// (known).
func (s *nameSet) add(name []byte, where string, known []string, code int64) *envelopeError {
	var prev []byte
	if s.index != nil {
		prev = s.index[string(foldName(name))]
	} else {
		for _, n := range s.names[:s.n] {
			if bytes.EqualFold(n, name) {
				prev = n
				break
			}
		}
	}
	if prev != nil {
		if bytes.Equal(prev, name) {
			return &envelopeError{code: code, msg: fmt.Sprintf("invalid message: the member %q appears twice in one object (%s)", name, where)}
		}
		return &envelopeError{code: code, msg: fmt.Sprintf("invalid message: the members %q and %q differ only in case (%s); member names are case-sensitive", prev, name, where)}
	}
	for _, k := range known {
		if string(name) != k && strings.EqualFold(string(name), k) {
			return &envelopeError{code: code, msg: fmt.Sprintf("invalid message: %q is not the member %q (%s); member names are case-sensitive", name, k, where)}
		}
	}
	switch {
	case s.index != nil:
		s.index[string(foldName(name))] = name
	case s.n < nameSetLinear:
		s.names[s.n] = name
		s.n++
	default:
		s.index = make(map[string][]byte, 4*nameSetLinear)
		for _, n := range s.names[:s.n] {
			s.index[string(foldName(n))] = n
		}
		s.index[string(foldName(name))] = name
	}
	return nil
}

// foldName maps every rune of name to one rune of its Unicode case-folding
// orbit (the smallest; an ASCII letter's lower case): two names fold equal
// exactly when bytes.EqualFold holds, which is when any decoder could
// match them without regard to case (encoding/json folds K, KELVIN SIGN
// and k together, and LATIN SMALL LETTER LONG S with s). A name without
// upper-case or non-ASCII letters is its own.
func foldName(name []byte) []byte {
	plain := true
	for _, c := range name {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			plain = false
			break
		}
	}
	if plain {
		return name
	}
	out := make([]byte, 0, len(name))
	for _, r := range string(name) {
		low := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			low = min(low, f)
		}
		if 'A' <= low && low <= 'Z' {
			low += 'a' - 'A'
		}
		out = utf8.AppendRune(out, low)
	}
	return out
}

// jsonString is the JSON string v decoded; see jsonBytes.
func jsonString(v []byte) (string, bool) {
	b, ok := jsonBytes(v)
	return string(b), ok
}

// jsonBytes decodes the JSON string v (a slice of v when it has no
// escapes); false when v is not a string or holds an escaped lone
// surrogate (decoders replace it with U+FFFD, so two different names could
// read as one).
func jsonBytes(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner, true
	}
	out := make([]byte, 0, len(inner))
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch inner[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(inner[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || i+7 > len(inner) || inner[i+1] != '\\' || inner[i+2] != 'u' {
					return nil, false
				}
				r = utf16.DecodeRune(r, hex4(inner[i+3:i+7]))
				if r == utf8.RuneError {
					return nil, false
				}
				i += 6
			}
			out = utf8.AppendRune(out, r)
		default: // " \ /
			out = append(out, inner[i])
		}
	}
	return out, true
}

// hex4 is the value of four hex digits (valid JSON guarantees them).
func hex4(h []byte) rune {
	n, _ := strconv.ParseUint(string(h), 16, 32)
	return rune(n)
}

// The scanners below read JSON that json.Valid accepted.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// eachMember calls fn with the decoded name (and whether it had escapes)
// and the raw value of each member of the object at b[i], in order, and
// returns the index after the object. It stops at fn's first error, or at
// a name with an escaped lone surrogate, refused with code.
func eachMember(b []byte, i int, code int64, fn func(name []byte, escaped bool, val []byte) *envelopeError) (int, *envelopeError) {
	i = skipSpace(b, i+1)
	if b[i] == '}' {
		return i + 1, nil
	}
	for {
		kEnd := stringEnd(b, i)
		rawName := b[i:kEnd]
		name, ok := jsonBytes(rawName)
		if !ok {
			return 0, &envelopeError{code: code, msg: fmt.Sprintf("invalid message: the member name %s holds an escaped lone surrogate", rawName)}
		}
		i = skipSpace(b, kEnd)
		i = skipSpace(b, i+1) // the colon
		vEnd := valueEnd(b, i)
		if err := fn(name, bytes.IndexByte(rawName, '\\') >= 0, b[i:vEnd]); err != nil {
			return 0, err
		}
		i = skipSpace(b, vEnd)
		if b[i] == '}' {
			return i + 1, nil
		}
		i = skipSpace(b, i+1) // the comma
	}
}

// stringEnd returns the index after the string at b[i].
func stringEnd(b []byte, i int) int {
	for j := i + 1; ; j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
}

// valueEnd returns the index after the value at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		d := 0
		for j := i; ; j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				d++
			case '}', ']':
				d--
				if d == 0 {
					return j + 1
				}
			}
		}
	}
	j := i
	for j < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[j])) {
		j++
	}
	return j
}

// depth is the deepest nesting of objects and arrays in the value v.
func depth(v []byte) int {
	d, deepest := 0, 0
	for j := 0; j < len(v); j++ {
		switch v[j] {
		case '"':
			j = stringEnd(v, j) - 1
		case '{', '[':
			d++
			deepest = max(deepest, d)
		case '}', ']':
			d--
		}
	}
	return deepest
}

// singleCall reads the body of a POST to /mcp once, refuses what
// readEnvelope refuses, offers the rest to the fast path and otherwise
// passes it on to next with the envelope (nil for other methods and for
// a body over the SDK's limit, which the SDK refuses); r.Body reads the
// body again. tel records each message it read (mcpspan.go): its span is
// the current one of the context the fast path and the SDK serve it in.
func singleCall(m *metrics, tel *mcpTelemetry, fast *fastPath, next func(w http.ResponseWriter, r *http.Request, env *envelope)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next(w, r, nil)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeEnvelopeError(w, http.StatusRequestEntityTooLarge, &envelopeError{code: jsonrpc.CodeInvalidRequest, msg: "request body too large or unreadable"})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if len(body) > mcp.DefaultMaxRequestBodyBytes {
			m.mcpSDK.Inc()
			next(w, r, nil)
			return
		}
		env, rerr := readEnvelope(body)
		if rerr != nil {
			m.mcpSDK.Inc()
			writeEnvelopeError(w, http.StatusBadRequest, rerr)
			return
		}
		if call, traced := tel.start(r, env); call != nil {
			cw := &mcpWriter{ResponseWriter: w, call: call}
			defer call.end(cw)
			w, r = cw, traced
		}
		if fast.serve(w, r, env) {
			m.mcpFast.Inc()
			return
		}
		m.mcpSDK.Inc()
		next(w, r, env)
	})
}

// writeEnvelopeError answers a refused message with its JSON-RPC error,
// as the SDK writes one (its members in the SDK's order, no HTML
// escaping), with the request's id or null.
func writeEnvelopeError(w http.ResponseWriter, status int, e *envelopeError) {
	id := []byte("null")
	if e.id != nil {
		var v any
		if json.Unmarshal(e.id, &v) == nil {
			if rid, err := jsonrpc.MakeID(v); err == nil {
				if b, err := marshalNoEscape(rid.Raw()); err == nil {
					id = b
				}
			}
		}
	}
	msg, _ := marshalNoEscape(&jsonrpc.Error{Code: e.code, Message: e.msg})
	out := make([]byte, 0, 64+len(msg))
	out = append(out, `{"jsonrpc":"2.0","id":`...)
	out = append(out, id...)
	out = append(out, `,"error":`...)
	out = append(out, msg...)
	out = append(out, '}')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}
