package api

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Approval is an operation awaiting a person's approval, as an approver
// sees it: the tool, the arguments as the gate hashed them, their
// fingerprint (which a decision must name), the requester and the window.
type Approval struct {
	OperationID       string          `json:"operation_id"`
	Tool              string          `json:"tool"`
	Args              json.RawMessage `json:"args"`
	ArgsHash          string          `json:"args_hash"`
	RequestedBy       string          `json:"requested_by"`
	RequestedAt       time.Time       `json:"requested_at"`
	Status            vocab.Status    `json:"status"`
	ApprovalExpiresAt *time.Time      `json:"approval_expires_at,omitempty"`
	// NotFingerprinted are the tool's arguments left out of the
	// fingerprint (its policy's volatile fields, such as a refund's free-
	// text reason): shown with Args, but a decision does not bind them.
	NotFingerprinted []string `json:"not_fingerprinted,omitempty"`
	// Summary is the tool's account of the call, with facts read as it
	// started waiting (gate.Mutation.Review); empty if it gives none.
	Summary string `json:"summary,omitempty"`
	// URL is the operation's approval page.
	URL string `json:"url"`
}

// decision is the body of POST /v1/approvals/{id}.
type decision struct {
	Decision string `json:"decision"`
	ArgsHash string `json:"args_hash"`
	Reason   string `json:"reason,omitempty"`
}

// restApproval is GET /v1/approvals/{id}: the operation to decide on,
// for a person of its tenant with approvals:decide.
func (s *Server) restApproval(w http.ResponseWriter, r *http.Request) {
	actor, ok := decider(w, r)
	if !ok {
		return
	}
	id, ok := operationIDParam(w, r)
	if !ok {
		return
	}
	c, err := s.gate.Store().ClaimGetByOperation(r.Context(), &core.ClaimGetByOperationParams{TenantID: actor.TenantID, OperationID: id})
	if errors.Is(err, vocab.ErrNotFound) {
		writeProblem(w, r, http.StatusNotFound, &callError{err: vocab.Errorf(vocab.CodeNotFound, "id", "no operation with this id")})
		return
	}
	if err != nil {
		writeProblem(w, r, http.StatusServiceUnavailable, unavailableFor(err))
		return
	}
	if c.Status != vocab.StatusAwaitingApproval {
		// approvals:decide reads the operations that asked for a person's
		// approval (awaiting it, or decided), not every operation of the
		// tenant.
		events, err := s.gate.Store().AuditListByKey(r.Context(), &core.AuditListByKeyParams{TenantID: c.TenantID, Tool: c.Tool, IdempotencyKey: c.IdempotencyKey})
		if err != nil {
			writeProblem(w, r, http.StatusServiceUnavailable, unavailableFor(err))
			return
		}
		if ops.ApprovalTrailOf(c, events) == nil {
			writeProblem(w, r, http.StatusNotFound, &callError{err: vocab.Errorf(vocab.CodeNotFound, "id", "no operation with this id asked for approval")})
			return
		}
	}
	writeJSON(w, http.StatusOK, s.approvalOf(c))
}

// decider is the request's actor when it may decide on approvals
// (approvals:decide); otherwise it answers 403 and reports false.
func decider(w http.ResponseWriter, r *http.Request) (vocab.Actor, bool) {
	actor, _ := ActorFromContext(r.Context())
	if !actor.HasScope(tokenspec.ScopeApprovalsDecide) {
		writeProblem(w, r, http.StatusForbidden, &callError{err: vocab.Errorf(vocab.CodeForbidden, "", "the token lacks scope %s", tokenspec.ScopeApprovalsDecide)})
		return vocab.Actor{}, false
	}
	return actor, true
}

// approvalOf is c as an approver sees it.
func (s *Server) approvalOf(c *core.Claim) *Approval {
	a := &Approval{OperationID: c.OperationID, Tool: c.Tool, Args: c.Args, ArgsHash: c.ArgsHash, RequestedBy: c.UserID,
		RequestedAt: c.CreatedAt, Status: c.Status, ApprovalExpiresAt: c.ApprovalExpiresAt, Summary: c.ApprovalSummary,
		URL: s.approvalURL(c.OperationID)}
	if spec, ok := s.tools.Get(c.Tool); ok && spec.Policy != nil {
		a.NotFingerprinted = spec.Policy.VolatileFields
	}
	return a
}

// restDecide is POST /v1/approvals/{id}: approve or deny the operation for
// the fingerprint the approver saw. Approving enqueues its job in the
// transaction that records the decision; every refusal changes nothing
// but an audit row.
func (s *Server) restDecide(w http.ResponseWriter, r *http.Request) {
	if !jsonBody(w, r) {
		return
	}
	actor, ok := decider(w, r)
	if !ok {
		return
	}
	var d decision
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		writeProblem(w, r, http.StatusBadRequest, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "body", "want {\"decision\": \"approve\" or \"deny\", \"args_hash\": …}: %v", err)})
		return
	}
	id, ok := operationIDParam(w, r)
	if !ok {
		return
	}
	if err := checkDecisionReason(d.Reason); err != nil {
		writeProblem(w, r, http.StatusBadRequest, &callError{err: err})
		return
	}
	if d.ArgsHash == "" {
		writeProblem(w, r, http.StatusUnprocessableEntity, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "args_hash", "is required: the fingerprint of the arguments you decide on (GET /v1/approvals/{id})")})
		return
	}
	p := &core.DecideParams{Approver: actor, RequestID: RequestIDFromContext(r.Context()), OperationID: id, ArgsHash: d.ArgsHash, Reason: d.Reason}
	var (
		c   *core.Claim
		err error
	)
	switch d.Decision {
	case "approve":
		c, err = s.gate.Approve(r.Context(), p)
	case "deny":
		c, err = s.gate.Deny(r.Context(), p)
	default:
		writeProblem(w, r, http.StatusUnprocessableEntity, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "decision", "must be approve or deny, got %q", d.Decision)})
		return
	}
	if err != nil {
		status, cerr := decideError(err)
		writeProblem(w, r, status, cerr)
		return
	}
	writeJSON(w, http.StatusOK, s.approvalOf(c))
}

// jsonBody reports whether r declares a JSON body (application/json,
// parameters allowed); otherwise it answers 415 naming the Content-Type. A
// decision is JSON only: an HTML form sends urlencoded, multipart or
// text/plain bodies, so a page of another site cannot submit one.
func jsonBody(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return true
	}
	writeProblem(w, r, http.StatusUnsupportedMediaType, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "Content-Type",
		"the Content-Type must be application/json, got %q: a decision is a JSON body ({\"decision\": …, \"args_hash\": …})", ct)})
	return false
}

// MaxDecisionReason bounds a decision's reason, in characters: it is stored
// in the audit row and shown with the operation.
const MaxDecisionReason = 500

// checkDecisionReason refuses a reason that is not printable text on one
// line (a NUL, a control character, invalid UTF-8) or is longer than
// MaxDecisionReason.
func checkDecisionReason(reason string) *vocab.Error {
	if !utf8.ValidString(reason) || strings.ContainsFunc(reason, unicode.IsControl) {
		return vocab.Errorf(vocab.CodeInvalidArgument, "reason", "must be printable text on one line (no control characters)")
	}
	if n := utf8.RuneCountInString(reason); n > MaxDecisionReason {
		return vocab.Errorf(vocab.CodeInvalidArgument, "reason", "is %d characters, at most %d", n, MaxDecisionReason)
	}
	return nil
}

// operationIDParam is the route's {id} when it is an operation id (a
// UUID); anything else names no operation, and gets 404 without a query.
func operationIDParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := chi.URLParam(r, "id")
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		writeProblem(w, r, http.StatusNotFound, &callError{err: vocab.Errorf(vocab.CodeNotFound, "id", "no operation with this id (an operation id is a UUID)")})
		return "", false
	}
	return id, true
}

// decideError is the answer to a refused decision.
func decideError(err error) (int, *callError) {
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		return http.StatusNotFound, &callError{err: vocab.Errorf(vocab.CodeNotFound, "id", "no operation with this id")}
	case errors.Is(err, core.ErrApprovalFingerprint):
		return http.StatusUnprocessableEntity, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "args_hash", "names other arguments than the operation's: decide on what GET /v1/approvals/{id} shows")}
	case errors.Is(err, core.ErrApprovalSelf):
		return http.StatusForbidden, &callError{err: vocab.Errorf(vocab.CodeForbidden, "", "the requester may not approve or deny their own call (four eyes)")}
	case errors.Is(err, core.ErrApprovalExpired):
		return http.StatusUnprocessableEntity, &callError{err: vocab.Errorf(vocab.CodeApprovalExpired, "", "the approval window has ended")}
	case errors.Is(err, core.ErrApprovalNotAwaiting):
		return http.StatusUnprocessableEntity, &callError{err: vocab.Errorf(vocab.CodeApprovalAlreadyDecided, "id", "the operation is not awaiting approval: decided already (or it never asked for one)")}
	}
	return http.StatusServiceUnavailable, unavailableFor(err)
}

// approvalURL is the page where a person decides on the operation.
func (s *Server) approvalURL(operationID string) string {
	return s.publicURL + ApprovalPagePath + operationID
}

// linkApproval sets the page's URL on op's approval, when it awaits one,
// and returns op.
func (s *Server) linkApproval(op *vocab.Operation) *vocab.Operation {
	if op != nil && op.Approval != nil {
		op.Approval.URL = s.approvalURL(op.OperationID)
	}
	return op
}

// approvalList is GET /v1/approvals' answer.
type approvalList struct {
	Approvals []*Approval `json:"approvals"`
}

// restListApprovals is GET /v1/approvals?limit=N: the operations of the
// approver's tenant awaiting approval, newest first (at most MaxPageSize;
// default DefaultPageSize).
func (s *Server) restListApprovals(w http.ResponseWriter, r *http.Request) {
	actor, ok := decider(w, r)
	if !ok {
		return
	}
	limit := DefaultPageSize
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			writeProblem(w, r, http.StatusBadRequest, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "limit", "must be an integer from 1 to %d, got %q", MaxPageSize, v)})
			return
		}
		limit = n
	}
	claims, err := s.gate.Store().ClaimListNewest(r.Context(), &core.ClaimListNewestParams{
		TenantID: actor.TenantID, Status: vocab.StatusAwaitingApproval, Limit: limit})
	if err != nil {
		writeProblem(w, r, http.StatusServiceUnavailable, unavailableFor(err))
		return
	}
	out := approvalList{Approvals: make([]*Approval, 0, len(claims))}
	for _, c := range claims {
		out.Approvals = append(out.Approvals, s.approvalOf(c))
	}
	writeJSON(w, http.StatusOK, out)
}
