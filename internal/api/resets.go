package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/resettoken"
)

// Defaults of Config's redeem limit: failed redeems per client address.
const (
	// DefaultRedeemFailureRate is how many failed redeems per second an
	// address gets back.
	DefaultRedeemFailureRate = 1
	// DefaultRedeemFailureBurst is how many failed redeems an address may
	// make at once.
	DefaultRedeemFailureBurst = 20
)

// RedeemPath is the route that redeems a password-reset token.
const RedeemPath = "/v1/password-resets/redeem"

// redeemRequest is the body of POST /v1/password-resets/redeem.
type redeemRequest struct {
	Token string `json:"token"`
}

// Redemption answers a redeemed password-reset token: whose reset it is.
type Redemption struct {
	TenantID    string `json:"tenant_id"`
	UserID      string `json:"user_id"`
	OperationID string `json:"operation_id"`
}

// redeemResetToken is POST /v1/password-resets/redeem: the token is the
// credential (no bearer token). It consumes the token once and answers
// whose reset it is; afterwards the token is reset_token_used. Failed
// redeems count against the client address (failureLimiter).
func (s *Server) redeemResetToken(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	client := clientAddr(r)
	if wait, blocked := s.redeemLimit.blocked(client); blocked {
		writeProblem(w, r, http.StatusTooManyRequests, &callError{retryAfter: wait,
			err: vocab.Errorf(vocab.CodeRateLimited, "", "too many failed redeems from this address; retry after %s", wait.Round(time.Second))})
		return
	}
	token, status, cerr := decodeRedeem(r.Body)
	if cerr == nil {
		var red *Redemption
		if red, cerr = s.redeem(r, token); cerr == nil {
			writeJSON(w, http.StatusOK, red)
			return
		}
		status = statusOf(cerr)
	}
	switch cerr.err.Code {
	case vocab.CodeInvalidArgument, vocab.CodeNotFound, vocab.CodeResetTokenUsed, vocab.CodeResetTokenExpired:
		s.redeemLimit.failed(client)
	}
	writeProblem(w, r, status, cerr)
}

// redeem consumes token, or says why it cannot.
func (s *Server) redeem(r *http.Request, token string) (*Redemption, *callError) {
	ctx, cancel := context.WithTimeout(r.Context(), s.dbTimeout)
	defer cancel()
	requestID := RequestIDFromContext(r.Context())
	red, err := s.resets.ResetTokenRedeem(ctx, resettoken.TokenHash(token))
	switch {
	case errors.Is(err, vocab.ErrAlreadyUsed):
		return nil, &callError{err: vocab.Errorf(vocab.CodeResetTokenUsed, "token", "this password-reset link was already used")}
	case errors.Is(err, vocab.ErrExpired):
		return nil, &callError{err: vocab.Errorf(vocab.CodeResetTokenExpired, "token", "this password-reset link has expired; ask for a new one")}
	case errors.Is(err, vocab.ErrNotFound):
		return nil, &callError{err: vocab.Errorf(vocab.CodeNotFound, "token", "no such password-reset token")}
	case errors.Is(err, vocab.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
		s.logger.WarnContext(r.Context(), "database unavailable", "request_id", requestID, "error", err)
		return nil, &callError{retryAfter: time.Second,
			err: vocab.Errorf(vocab.CodeUnavailable, "", "the database is unreachable; retry")}
	case err != nil:
		s.logger.ErrorContext(r.Context(), "redeem failed", "request_id", requestID, "error", err)
		return nil, &callError{err: vocab.Errorf(vocab.CodeInternal, "", "internal error (request %s)", requestID)}
	}
	if info, ok := r.Context().Value(requestLogKey).(*requestLog); ok {
		info.tenant, info.user = red.TenantID, red.UserID
	}
	s.logger.InfoContext(r.Context(), "password-reset token redeemed", "request_id", requestID,
		"tenant", red.TenantID, "user", red.UserID, "operation_id", red.OperationID)
	return &Redemption{TenantID: red.TenantID, UserID: red.UserID, OperationID: red.OperationID}, nil
}

// decodeRedeem reads {"token": "…"}: one JSON object, no other member, a
// token of the shape resetmail issues. Its refusals are invalid_argument,
// answered with status (413 for a body over the limit, else 400).
func decodeRedeem(body io.Reader) (token string, status int, cerr *callError) {
	invalid := func(field, format string, args ...any) *callError {
		return &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, field, format, args...)}
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var req redeemRequest
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", http.StatusRequestEntityTooLarge, invalid("body", "request body is larger than %d bytes", tooLarge.Limit)
		}
		return "", http.StatusBadRequest, invalid("body", "want a JSON object {\"token\": \"…\"}: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", http.StatusBadRequest, invalid("body", "unexpected data after the JSON object")
	}
	if !resettoken.WellFormed(req.Token) {
		return "", http.StatusBadRequest, invalid("token", "must be the %d-character token of a reset link (copy the whole link)", resettoken.TokenLen)
	}
	return req.Token, 0, nil
}
