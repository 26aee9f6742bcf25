package api

// Shim over the go-sdk, on for exactly the release its byte-equality tests
// ran against (fastPathSDK, v1.8.0; TestFastPathPinIsGoModsSDK holds it to
// go.mod). Delete it when the SDK's stateless StreamableHTTPHandler serves
// a tools/call without building a server session per request and decodes
// the body once: when its cost per call is near this path's
// (BenchmarkMCPToolCall; docs/benchmarks.md, "The MCP fast path").

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP SDK's stateless handler builds a server session for every HTTP
// request (its state, goroutines, channels) and decodes the body five or
// six times with a decoder that allocates 32 kB per call: over 1 ms of CPU
// and 300 kB of garbage per tools/call, three times the cost of the gate
// behind it. fastPath answers the hot request itself: a plain tools/call
// of a served tool, with the bytes, status and headers the SDK (v1.8)
// would answer, by calling the same tool handler through the same
// recoverMCP. It reads nothing itself: singleCall has read the body
// (readEnvelope) and refused what the one reading refuses. Anything else
// goes to the SDK, unchanged: every other method, notifications,
// task-augmented calls, a progress token or any other _meta, an id or a
// member it does not recognise, unknown tools, headers or protocol
// versions it does not accept below, and on the sessionless protocol
// numbers in the arguments it cannot be sure the SDK decodes.
// mcpfast_test.go sends the same requests both ways and compares the
// answers.
type fastPath struct {
	impl *mcp.Implementation
	// tools are the tool handlers by name, each behind recoverMCP, as the
	// SDK runs them.
	tools map[string]mcp.MethodHandler
}

// SDK protocol versions (go-sdk v1.8's supported list).
const (
	// mcpVersionStateless is the protocol version of SEP-2575, sessionless:
	// each call carries the client's info and capabilities in its _meta and
	// the answer carries the server's; the go-sdk client speaks it.
	mcpVersionStateless = "2026-07-28"
	// mcpVersionTasks is the revision of SEP-1686's tasks (the TypeScript
	// SDK's); 2026-07-28 has the tasks extension instead.
	mcpVersionTasks = "2025-11-25"
)

// tasksExtension is SEP-2663's extension identifier.
const tasksExtension = "io.modelcontextprotocol/tasks"

// mcpVersionsLegacy are the versions before mcpVersionStateless that the
// SDK serves (the TypeScript SDK speaks 2025-11-25); "" is a request
// without the header, which the SDK takes for 2025-03-26.
var mcpVersionsLegacy = [...]string{"", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// _meta keys of SEP-2575.
const (
	metaProtocolVersion    = mcp.MetaKeyProtocolVersion
	metaClientInfo         = mcp.MetaKeyClientInfo
	metaClientCapabilities = mcp.MetaKeyClientCapabilities
	metaServerInfo         = mcp.MetaKeyServerInfo
)

// fastPathSDK is the go-sdk release whose answers the fast path copies and
// mcpfast_test.go compares against: exactly this version, not its minor
// series (a patch release may change a byte of an answer). A test fails
// when go.mod requires another: update the pin with the tests run.
const fastPathSDK = "v1.8.0"

// fastPathSwitch turns the fast path off when set to "off", for measuring
// what it is worth (docs/benchmarks.md); it is no setting of the product.
const fastPathSwitch = "IDEMGATE_MCP_FAST_PATH"

// newFastPath returns the fast path for these tools, or nil when it must
// stay off: MCPGODEBUG switches the SDK's compatibility behaviours, which
// the fast path does not copy; a binary built with another go-sdk version
// than fastPathSDK (or a replaced one) runs everything through the SDK
// until the fast path is checked against it; IDEMGATE_MCP_FAST_PATH=off
// (benchmarks). A tool whose input schema binds an argument
// to an HTTP header (x-mcp-header) is left to the SDK, which checks it.
func newFastPath(impl *mcp.Implementation, tools map[string]mcp.MethodHandler, schemas map[string]any, logger *slog.Logger) *fastPath {
	if os.Getenv("MCPGODEBUG") != "" {
		logger.Info("MCP fast path off: MCPGODEBUG is set")
		return nil
	}
	if os.Getenv(fastPathSwitch) == "off" {
		logger.Info("MCP fast path off: " + fastPathSwitch + "=off")
		return nil
	}
	if v := sdkVersion(); !sdkVerified(v) {
		logger.Warn("MCP fast path off: built with a go-sdk version it was not checked against", "go_sdk", v, "checked", fastPathSDK)
		return nil
	}
	f := &fastPath{impl: impl, tools: map[string]mcp.MethodHandler{}}
	for name, h := range tools {
		if b, err := json.Marshal(schemas[name]); err != nil || bytes.Contains(b, []byte("x-mcp-header")) {
			continue
		}
		f.tools[name] = h
	}
	return f
}

// sdkVersion is the go-sdk version the binary was built with, or "" when
// the build does not say (test binaries list no dependencies: their go-sdk
// is go.mod's, which TestFastPathPinIsGoModsSDK holds to fastPathSDK). A
// replacement is its module's version, or "replaced by PATH" for a
// directory (which is no checked release).
func sdkVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/modelcontextprotocol/go-sdk" {
			if r := d.Replace; r != nil {
				if r.Version == "" || r.Path != d.Path {
					return "replaced by " + r.Path + " " + r.Version
				}
				return r.Version
			}
			return d.Version
		}
	}
	return ""
}

// sdkVerified reports whether the fast path may run with go-sdk version v:
// exactly fastPathSDK, or a build that does not say (tests).
func sdkVerified(v string) bool {
	return v == "" || v == fastPathSDK
}

// serve answers the request and returns true when it is a plain tools/call
// of a served tool; otherwise it writes nothing and returns false. env is
// the body as readEnvelope read it.
func (f *fastPath) serve(w http.ResponseWriter, r *http.Request, env *envelope) bool {
	if f == nil || !f.acceptsHeaders(r) {
		return false
	}
	msg, ok := fastCall(env)
	if !ok {
		return false
	}
	h, ok := f.tools[msg.name]
	if !ok {
		return false // the SDK answers an unknown tool
	}
	stateless := false
	switch v := r.Header.Get("Mcp-Protocol-Version"); {
	case v == mcpVersionStateless:
		// The SDK's checks of SEP-2575 calls: the _meta triple, the
		// standard headers naming the method and the tool, and (to read
		// the tool's name) its decoding of the arguments into Go values,
		// which refuses numbers beyond float64 (1e400).
		if msg.meta == nil || !validStatelessMeta(msg.meta) || !plainNumbers(msg.args) ||
			r.Header.Get("Mcp-Method") != "tools/call" || r.Header.Get("Mcp-Name") != msg.name {
			return false
		}
		stateless = true
		r = r.WithContext(context.WithValue(r.Context(), mrtrKey{}, readMRTR(env.call, env.params)))
	case isLegacyVersion(v):
		if msg.meta != nil {
			return false
		}
	default:
		return false
	}

	req := &mcp.CallToolRequest{
		Params: &mcp.CallToolParamsRaw{Name: msg.name, Arguments: json.RawMessage(msg.args)},
		Extra:  &mcp.RequestExtra{Header: r.Header, TokenInfo: auth.TokenInfoFromContext(r.Context())},
	}
	res, err := h(r.Context(), "tools/call", req)
	out := make([]byte, 0, 1024)
	out = append(out, `{"jsonrpc":"2.0","id":`...)
	out = append(out, msg.id...)
	result, _ := res.(*mcp.CallToolResult)
	if err == nil && result == nil {
		err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "tool handler returned no result"}
	}
	if err == nil {
		out = append(out, `,"result":`...)
		out, err = appendResult(out, result, f.impl, stateless)
	}
	if err != nil {
		out = append(out[:0], `{"jsonrpc":"2.0","id":`...)
		out = append(out, msg.id...)
		out = append(out, `,"error":`...)
		werr, ok := err.(*jsonrpc.Error)
		if !ok {
			// The SDK's jsonrpc2 toWireError: the message of err, the
			// code of the wire error it wraps, if any.
			werr = &jsonrpc.Error{Message: err.Error()}
			var wrapped *jsonrpc.Error
			if errors.As(err, &wrapped) {
				werr.Code = wrapped.Code
			}
		}
		b, merr := marshalNoEscape(werr)
		if merr != nil {
			b = []byte(`{"code":-32603,"message":"internal error"}`)
		}
		out = append(out, b...)
		mcpCallFrom(r.Context()).rpcError(werr)
	} else {
		mcpCallFrom(r.Context()).toolResult(result.IsError)
	}
	out = append(out, '}')
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
	return true
}

// appendResult appends the JSON of a tools/call result as the SDK writes
// it: an empty content list rather than null, and on the stateless
// protocol the server's info in _meta and resultType "complete", the last
// member of CallToolResult's JSON.
func appendResult(out []byte, res *mcp.CallToolResult, impl *mcp.Implementation, stateless bool) ([]byte, error) {
	if res.Content == nil || stateless {
		r := *res
		res = &r
		if res.Content == nil {
			res.Content = []mcp.Content{}
		}
	}
	if stateless {
		if res.Meta == nil {
			res.Meta = mcp.Meta{}
		} else {
			m := make(mcp.Meta, len(res.Meta)+1)
			for k, v := range res.Meta {
				m[k] = v
			}
			res.Meta = m
		}
		if _, ok := res.Meta[metaServerInfo]; !ok {
			res.Meta[metaServerInfo] = impl
		}
	}
	b, err := marshalNoEscape(res)
	if err != nil {
		return out, err
	}
	if stateless {
		// The SDK writes resultType as the last member of the result
		// (it has no inputRequests or requestState); ours has none yet.
		if len(b) < 2 || b[len(b)-1] != '}' || hasMember(b, "resultType") {
			return out, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "api: unexpected tools/call result JSON"}
		}
		out = append(out, b[:len(b)-1]...)
		if res.InputRequests != nil || res.RequestState != "" {
			out = append(out, `,"resultType":"input_required"}`...) // mrtr.go
		} else {
			out = append(out, `,"resultType":"complete"}`...)
		}
	} else {
		out = append(out, b...)
	}
	return out, nil
}

// marshalNoEscape is JSON without HTML escaping, as the SDK's jsonrpc2
// encodes messages.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func isLegacyVersion(v string) bool {
	for _, l := range mcpVersionsLegacy {
		if v == l {
			return true
		}
	}
	return false
}

// acceptsHeaders reports whether the SDK's stateless handler lets the
// request through to its session: its DNS rebinding protection (a loopback
// listener answers only loopback Host names), no Last-Event-ID, a JSON body
// and an Accept naming both JSON and event streams.
func (f *fastPath) acceptsHeaders(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil {
		if isLoopback(local.String()) && !isLoopback(r.Host) {
			return false
		}
	}
	if len(r.Header.Values("Last-Event-ID")) > 0 {
		return false
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return false
		}
	}
	jsonOK, streamOK := streamableAccepts(r.Header.Values("Accept"))
	return jsonOK && streamOK
}

// isLoopback is the SDK's util.IsLoopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.IsLoopback()
}

// streamableAccepts is the SDK's check of Accept headers.
func streamableAccepts(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for _, raw := range strings.Split(value, ",") {
			token := strings.TrimSpace(raw)
			base, _, _ := strings.Cut(token, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK = true
				streamOK = true
			}
		}
	}
	return jsonOK, streamOK
}

// toolCall is what the fast path reads of a tools/call request.
type toolCall struct {
	// id is the raw JSON id: a string of printable ASCII without escapes,
	// or an integer of at most 15 digits, which the SDK writes back as
	// it came.
	id   []byte
	name string
	// args is the raw JSON object of params.arguments.
	args []byte
	// meta is the raw JSON object of params._meta, or nil.
	meta []byte
}

// maxArgsDepth bounds the nesting the fast path scans in arguments; deeper
// ones go to the SDK, which has its own bound.
const maxArgsDepth = 64

// fastCall reports whether env is a tools/call the fast path answers: an
// object with exactly the members jsonrpc, id, method "tools/call" and
// params, whose params has a name, an object of arguments and perhaps a
// _meta object, and nothing else; no escapes in member names or the name.
func fastCall(env *envelope) (toolCall, bool) {
	c := env.call
	if env.method != methodToolsCall || env.extra || env.escaped || c == nil || c.extra || c.task != nil ||
		env.id == nil || !plainID(env.id) || c.nameRaw == nil || c.nameRaw[0] != '"' ||
		c.args == nil || c.args[0] != '{' || depth(c.args) > maxArgsDepth ||
		c.meta != nil && c.meta[0] != '{' {
		return toolCall{}, false
	}
	return toolCall{id: env.id, name: c.name, args: c.args, meta: c.meta}, true
}

// plainNumbers reports whether every number in the JSON value v is one any
// decoder reads as a finite float64: no exponent, at most 20 characters.
func plainNumbers(v []byte) bool {
	for j := 0; j < len(v); j++ {
		switch c := v[j]; {
		case c == '"':
			j = stringEnd(v, j) - 1
		case c == '-' || '0' <= c && c <= '9':
			k := j
			for k < len(v) && strings.IndexByte("+-.0123456789eE", v[k]) >= 0 {
				k++
			}
			if k-j > 20 || bytes.ContainsAny(v[j:k], "eE") {
				return false
			}
			j = k - 1
		}
	}
	return true
}

// hasMember reports whether the JSON object b has a member named name.
func hasMember(b []byte, name string) bool {
	found := false
	_, err := eachMember(b, 0, jsonrpc.CodeInternalError, func(n []byte, _ bool, _ []byte) *envelopeError {
		found = found || string(n) == name
		return nil
	})
	return found || err != nil
}

// plainID reports whether a JSON-RPC id is one the SDK writes back
// byte for byte: a string of printable ASCII without escapes, or an
// integer of at most 15 digits other than -0 (it decodes numbers into
// float64 and writes them back as int64).
func plainID(v []byte) bool {
	switch {
	case v[0] == '"':
		for _, c := range v[1 : len(v)-1] {
			if c < 0x20 || c > 0x7e || c == '\\' {
				return false
			}
		}
		return true
	case string(v) == "-0":
		return false
	}
	digits := v
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validStatelessMeta reports whether a SEP-2575 _meta is one the SDK
// certainly accepts: the protocol version, client capabilities among
// roots (listChanged only), sampling, elicitation and experimental (empty
// objects), and perhaps client info with string members only. Anything
// else (a progress token, a log level, other keys or shapes) goes to the
// SDK.
func validStatelessMeta(meta []byte) bool {
	const (
		seenVersion = 1 << iota
		seenInfo
		seenCaps
	)
	_, seen, ok := eachMemberOnce(meta, 0, func(key, v []byte) (int, bool) {
		switch string(key) {
		case metaProtocolVersion:
			return seenVersion, string(v) == `"`+mcpVersionStateless+`"`
		case metaClientInfo:
			return seenInfo, validClientInfo(v)
		case metaClientCapabilities:
			return seenCaps, validClientCapabilities(v)
		}
		return 0, false
	})
	return ok && seen&(seenVersion|seenCaps) == seenVersion|seenCaps
}

// The members validClientInfo and validClientCapabilities accept.
var (
	clientInfoMembers       = []string{"name", "title", "description", "version", "websiteUrl"}
	clientCapabilityMembers = []string{"roots", "sampling", "elicitation", "experimental"}
)

// validClientInfo: an object of mcp.Implementation's string members.
func validClientInfo(v []byte) bool {
	if v[0] != '{' {
		return false
	}
	_, _, ok := eachMemberOnce(v, 0, func(key, val []byte) (int, bool) {
		i := indexOf(clientInfoMembers, key)
		if i < 0 {
			return 0, false
		}
		return 1 << i, val[0] == '"'
	})
	return ok
}

// validClientCapabilities: an object of roots ({} or {"listChanged":
// bool}) and empty sampling, elicitation and experimental objects.
func validClientCapabilities(v []byte) bool {
	if v[0] != '{' {
		return false
	}
	_, _, ok := eachMemberOnce(v, 0, func(key, val []byte) (int, bool) {
		switch i := indexOf(clientCapabilityMembers, key); i {
		case -1:
			return 0, false
		case 0:
			return 1, validRoots(val)
		default:
			return 1 << i, emptyObject(val)
		}
	})
	return ok
}

// indexOf is the index of key in list, or -1.
func indexOf(list []string, key []byte) int {
	for i, s := range list {
		if s == string(key) {
			return i
		}
	}
	return -1
}

func validRoots(v []byte) bool {
	if v[0] != '{' {
		return false
	}
	_, _, ok := eachMemberOnce(v, 0, func(key, val []byte) (int, bool) {
		return 1, string(key) == "listChanged" && (string(val) == "true" || string(val) == "false")
	})
	return ok
}

func emptyObject(v []byte) bool {
	return v[0] == '{' && skipSpace(v, 1) == len(v)-1
}

// errStop stops eachMember for eachMemberOnce.
var errStop = &envelopeError{}

// eachMemberOnce reads objects whose members may appear once each: fn
// validates a member and names it by a bit of its own; it stops with false
// when fn does, when a bit comes twice, or at a member name with an escape.
// It returns the bits seen.
func eachMemberOnce(b []byte, i int, fn func(key, val []byte) (bit int, ok bool)) (end, seen int, ok bool) {
	end, err := eachMember(b, i, jsonrpc.CodeInvalidParams, func(key []byte, escaped bool, val []byte) *envelopeError {
		if escaped {
			return errStop
		}
		bit, valid := fn(key, val)
		if !valid || bit == 0 || seen&bit != 0 {
			return errStop
		}
		seen |= bit
		return nil
	})
	return end, seen, err == nil
}
