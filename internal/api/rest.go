package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// restTool is the REST twin of a tool call, after the IETF Idempotency-Key
// header draft: POST /v1/tools/{tool} with the key in the Idempotency-Key
// header and the other arguments as a JSON object body.
func (s *Server) restTool(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFromContext(r.Context())
	def, ok := s.toolByName(chi.URLParam(r, "tool"))
	if !ok {
		writeProblem(w, r, http.StatusNotFound, &callError{err: vocab.Errorf(vocab.CodeNotFound, "tool", "no tool %q", chi.URLParam(r, "tool"))})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeProblem(w, r, http.StatusRequestEntityTooLarge, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "body", "request body too large or unreadable")})
		return
	}
	c := &call{actor: actor, requestID: RequestIDFromContext(r.Context()), clientRequestID: ClientRequestIDFromContext(r.Context()), tool: def, raw: body}
	if !def.Mutating {
		out, cerr := s.read(r.Context(), c)
		if cerr != nil {
			writeProblem(w, r, statusOf(cerr), cerr)
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	s.restMutate(w, r, c)
}

// confirmHeader carries core.ConfirmField on REST calls.
const confirmHeader = "Idempotency-Confirm-Duplicate-Of"

// restMutate runs a mutation call: the key travels in the header and is
// merged into the arguments, so that one validation and one fingerprint
// serve MCP and REST alike.
func (s *Server) restMutate(w http.ResponseWriter, r *http.Request, c *call) {
	key, ok := s.restKey(w, r, c)
	if !ok {
		return
	}
	args, err := core.DecodeArgs(c.raw)
	if err != nil {
		s.rejectREST(w, r, c, key, asDomainError(err))
		return
	}
	if bodyKey, ok := args["idempotency_key"]; ok && bodyKey != key {
		s.rejectREST(w, r, c, key, vocab.Errorf(vocab.CodeInvalidArgument, "idempotency_key", "the body's idempotency_key differs from the Idempotency-Key header; send the key in the header only"))
		return
	}
	args["idempotency_key"] = key
	// A confirmation of a new intent beside a possible duplicate may
	// travel as a header too, bound to the operation it names.
	if confirm, present := r.Header[confirmHeader]; present {
		if len(confirm) != 1 {
			s.rejectREST(w, r, c, key, vocab.Errorf(vocab.CodeInvalidArgument, confirmHeader, "the header must appear once"))
			return
		}
		if body, ok := args[core.ConfirmField]; ok && body != confirm[0] {
			s.rejectREST(w, r, c, key, vocab.Errorf(vocab.CodeInvalidArgument, core.ConfirmField,
				"the body's %s differs from the %s header; send it once", core.ConfirmField, confirmHeader))
			return
		}
		args[core.ConfirmField] = confirm[0]
	}
	c.raw = mustJSON(args)

	ans, cerr := s.mutate(r.Context(), c)
	if cerr != nil {
		if cerr.replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		writeProblem(w, r, statusOf(cerr), cerr)
		return
	}
	status := http.StatusOK
	switch {
	case ans.Operation.Approval != nil:
		// Awaiting a person, first call and retries alike: accepted, with
		// the page where a person decides.
		status = http.StatusAccepted
		w.Header().Set("Retry-After", retryAfterSeconds(time.Duration(ans.RetryAfterMS)*time.Millisecond))
		w.Header().Set("Location", operationPath(c.tool.Name, key))
		w.Header().Set("Link", "<"+ans.Operation.Approval.URL+`>; rel="approval"`)
	case ans.Outcome == vocab.OutcomeInFlight:
		status = http.StatusConflict
		w.Header().Set("Retry-After", retryAfterSeconds(time.Duration(ans.RetryAfterMS)*time.Millisecond))
		w.Header().Set("Location", operationPath(c.tool.Name, key))
	case !ans.Operation.Status.Terminal():
		status = http.StatusAccepted
		w.Header().Set("Location", operationPath(c.tool.Name, key))
	}
	if ans.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, ans)
}

// restKey returns the key of the Idempotency-Key header; a missing,
// repeated or malformed header is rejected (false).
func (s *Server) restKey(w http.ResponseWriter, r *http.Request, c *call) (string, bool) {
	header, present := r.Header["Idempotency-Key"]
	switch {
	case !present:
		s.rejectREST(w, r, c, "", vocab.Errorf(vocab.CodeIdempotencyKeyRequired, "Idempotency-Key", "the Idempotency-Key header is required for %s", c.tool.Name))
		return "", false
	case len(header) != 1:
		s.rejectREST(w, r, c, "", vocab.Errorf(vocab.CodeInvalidIdempotencyKey, "Idempotency-Key", "the header must appear once"))
		return "", false
	}
	key, err := core.ParseKeyHeader(header[0])
	if err != nil {
		s.rejectREST(w, r, c, header[0], asDomainError(err))
		return "", false
	}
	return key, true
}

// rejectREST answers a rejection found before the common path ran, with
// its denied audit row naming the key as received.
func (s *Server) rejectREST(w http.ResponseWriter, r *http.Request, c *call, key string, derr *vocab.Error) {
	if !s.mayRead(c) {
		derr = vocab.Errorf(vocab.CodeForbidden, "", "the token lacks scope %s for %s", c.tool.Scope, c.tool.Name)
		key = "" // as over MCP: the scope is checked before anything is read
	}
	cerr := s.deny(r.Context(), c, key, derr, time.Now())
	writeProblem(w, r, statusOf(cerr), cerr)
}

// restOperation is GET /v1/operations/{tool}/{key}.
func (s *Server) restOperation(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFromContext(r.Context())
	def, _ := s.toolByName(GetOperation)
	c := &call{actor: actor, requestID: RequestIDFromContext(r.Context()), clientRequestID: ClientRequestIDFromContext(r.Context()), tool: def,
		raw: mustJSON(map[string]string{"tool": chi.URLParam(r, "tool"), "idempotency_key": chi.URLParam(r, "key")})}
	out, cerr := s.read(r.Context(), c)
	if cerr != nil {
		writeProblem(w, r, statusOf(cerr), cerr)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func operationPath(tool, key string) string {
	return "/v1/operations/" + url.PathEscape(tool) + "/" + url.PathEscape(key)
}

func retryAfterSeconds(d time.Duration) string {
	secs := int((d + time.Second - 1) / time.Second)
	return strconv.Itoa(max(secs, 1))
}

// statusOf returns the HTTP status of an error: its code's (status.go), the
// same for a refusal, a fresh failure and a replayed one.
func statusOf(e *callError) int { return statusFor(e.err.Code) }

// problem is an RFC 9457 problem detail with our code. Its type,
// https://idemgate.dev/errors/<code>, is an identifier (docs/errors.md),
// not a page.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	*errorBody
}

// writeProblem answers e as application/problem+json with status (statusOf
// for most callers; 413 for an oversized body), and Retry-After when e
// asks a client to wait.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, e *callError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(e.retryAfter))
	}
	p := problem{
		Type:      "https://idemgate.dev/errors/" + string(e.err.Code),
		Title:     string(e.err.Code),
		Status:    status,
		Detail:    e.err.Message,
		Instance:  r.URL.Path,
		errorBody: e.body(),
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
