package api

// Shim: the transport rules the go-sdk v1.8.0 leaves to the server. Delete
// it when the SDK's StreamableHTTPHandler validates Origin on every request
// against an allowed-origins option and answers 403 (its
// CrossOriginProtection option, deprecated in v1.8.0, is net/http's CSRF
// check: Sec-Fetch-Site first, safe methods passed, a plain-text 403), and
// answers every JSON-RPC request in JSON-RPC (-32601, -32602, -32600 in
// application/json rather than a plain-text 400). The method table goes
// with it.

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/idemgate/idemgate/internal/vocab"
)

// The transport rules of MCP's Streamable HTTP (2025-11-25 and 2026-07-28
// alike) that the SDK (v1.8) leaves to the server, applied here to every
// path: the fast path, the task layer and the SDK behind them.
//   - Origin: a request that carries an Origin header (a browser's) is
//     served only when that origin is allowed; else 403. A request without
//     Origin is a non-browser client's and is served. The REST twin takes
//     the same rule: a browser page could reach it as well.
//   - A JSON-RPC request is answered in JSON-RPC, application/json: the SDK
//     answers an unknown method, a request without the params its method
//     needs and a notification sent with an id in plain text (HTTP 400) on
//     the legacy versions; checkRequest answers them first, with -32601,
//     -32602 and -32600. Bodies that are not JSON-RPC at all keep their
//     HTTP errors (readEnvelope's and the SDK's).

// originAllowed reports whether the request may be served: it has no Origin
// header, or one Origin that is in allowed, or, when allowed is empty, the
// server's own origin (the origin's host and port are the request's Host,
// default ports aside: a page the server itself served).
func originAllowed(r *http.Request, allowed map[string]bool) bool {
	values := r.Header.Values("Origin")
	if len(values) == 0 {
		return true
	}
	if len(values) > 1 {
		return false
	}
	origin, ok := normalizeOrigin(values[0])
	if !ok {
		return false // "null", a path, a user, another scheme: never ours
	}
	if len(allowed) > 0 {
		return allowed[origin]
	}
	_, host, _ := strings.Cut(origin, "://")
	return host == stripDefaultPort(strings.ToLower(r.Host))
}

// normalizeOrigin returns an origin as originAllowed compares it:
// scheme://host[:port] in lower case without a default port (80 for
// http, 443 for https); false when s is not an http(s) origin (a path,
// a query, a user, "null").
func normalizeOrigin(s string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" || u.User != nil || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" ||
		(u.Path != "" && u.Path != "/") {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	return scheme + "://" + stripDefaultPort(strings.ToLower(u.Host)), true
}

// stripDefaultPort drops :80 and :443 from host:port.
func stripDefaultPort(host string) string {
	if h, ok := strings.CutSuffix(host, ":80"); ok {
		return h
	}
	if h, ok := strings.CutSuffix(host, ":443"); ok {
		return h
	}
	return host
}

// checkOrigin refuses a request from a foreign origin with 403: a JSON-RPC
// error without id on /mcp (as the specification allows), problem+json on
// the REST routes.
func (s *Server) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if originAllowed(r, s.allowedOrigins) {
			next.ServeHTTP(w, r)
			return
		}
		msg := fmt.Sprintf("Forbidden: Origin %q is not allowed (allowed: %s)", r.Header.Get("Origin"), s.allowedOriginsText())
		s.logger.WarnContext(r.Context(), "foreign Origin refused", "request_id", RequestIDFromContext(r.Context()),
			"origin", r.Header.Get("Origin"), "path", r.URL.Path)
		if r.URL.Path == "/mcp" {
			writeEnvelopeError(w, http.StatusForbidden, &envelopeError{code: codeForbiddenOrigin, msg: msg})
			return
		}
		writeProblem(w, r, http.StatusForbidden, &callError{err: vocab.Errorf(vocab.CodeForbidden, "Origin", "%s", msg)})
	})
}

// codeForbiddenOrigin is the JSON-RPC code of a refused Origin: a server
// error (the range -32000 to -32099), as the TypeScript SDK's servers
// answer it.
const codeForbiddenOrigin = -32000

func (s *Server) allowedOriginsText() string {
	if len(s.allowedOrigins) == 0 {
		return "this server's own origin"
	}
	list := make([]string, 0, len(s.allowedOrigins))
	for o := range s.allowedOrigins {
		list = append(list, o)
	}
	sort.Strings(list)
	return strings.Join(list, ", ")
}

// Method flags of the SDK's method table.
const (
	// methodNotification: the method is a notification, sent without id.
	methodNotification = 1 << iota
	// methodParamsOptional: the request may come without params.
	methodParamsOptional
)

// sdkMethods are the methods the go-sdk (v1.8.0, serverMethodInfos in
// mcp/server.go) serves, with their flags; the server's custom methods
// (addTaskMethods) are added to a server's own table. transport_test.go
// checks the table against the SDK: every method here is handled, and one
// missing from it is not.
var sdkMethods = map[string]int{
	"completion/complete":              0,
	"server/discover":                  methodParamsOptional,
	"initialize":                       0,
	"ping":                             methodParamsOptional,
	"prompts/list":                     methodParamsOptional,
	"prompts/get":                      0,
	"tools/list":                       methodParamsOptional,
	"tools/call":                       0,
	"resources/list":                   methodParamsOptional,
	"resources/templates/list":         methodParamsOptional,
	"resources/read":                   0,
	"logging/setLevel":                 0,
	"resources/subscribe":              0,
	"subscriptions/listen":             0,
	"resources/unsubscribe":            0,
	"notifications/cancelled":          methodNotification | methodParamsOptional,
	"notifications/initialized":        methodNotification | methodParamsOptional,
	"notifications/roots/list_changed": methodNotification | methodParamsOptional,
	"notifications/progress":           methodNotification,
}

// checkRequest answers, in JSON-RPC, a request (a message with a method
// and an id) the SDK would refuse in plain text: an unknown method
// (-32601), a notification's method sent with an id (-32600), a method that
// needs params sent without (-32602). It returns false when it answered.
// The HTTP status is the SDK's for the revision: 200 on the legacy ones
// (whose clients read a JSON-RPC error only from a 2xx answer), and on
// 2026-07-28 404 for -32601, 400 for -32602.
func (s *Server) checkRequest(w http.ResponseWriter, r *http.Request, env *envelope) bool {
	if env == nil || !env.hasMethod || env.id == nil {
		return true
	}
	flags, known := s.methods[env.method]
	if stateless := r.Header.Get("Mcp-Protocol-Version") >= mcpVersionStateless; stateless && legacyTaskMethods[env.method] ||
		!stateless && statelessTaskMethods[env.method] {
		known = false // the other revision's
	}
	var e *envelopeError
	switch {
	case !known:
		e = &envelopeError{code: jsonrpc.CodeMethodNotFound, msg: fmt.Sprintf("method not found: %q", env.method)}
	case flags&methodNotification != 0:
		e = &envelopeError{code: jsonrpc.CodeInvalidRequest, msg: fmt.Sprintf("invalid request: %q is a notification, sent without an id", env.method)}
	case flags&methodParamsOptional == 0 && env.params == nil:
		e = &envelopeError{code: jsonrpc.CodeInvalidParams, msg: fmt.Sprintf("invalid params: %q needs params", env.method)}
	default:
		return true
	}
	e.id = env.id
	status := http.StatusOK
	if r.Header.Get("Mcp-Protocol-Version") >= mcpVersionStateless {
		switch e.code {
		case jsonrpc.CodeMethodNotFound:
			status = http.StatusNotFound
		case jsonrpc.CodeInvalidParams:
			status = http.StatusBadRequest
		}
	}
	writeEnvelopeError(w, status, e)
	return false
}
