// Package resetroute serves the links the built-in send_password_reset
// mails: the page GET /reset-password and the route it posts to, POST
// /v1/password-resets/redeem. The built-ins contribute both to the api
// (api.Config.Routes); the api itself knows nothing of password resets.
package resetroute

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/resettoken"
)

// Defaults of Config's redeem limit: failed redeems per client address.
const (
	// DefaultFailureRate is how many failed redeems per second an address
	// gets back.
	DefaultFailureRate = 1
	// DefaultFailureBurst is how many failed redeems an address may make
	// at once.
	DefaultFailureBurst = 20
)

// RedeemPath is the route that redeems a password-reset token.
const RedeemPath = "/v1/password-resets/redeem"

// PagePath is the api's own password-reset page, where the mails link
// unless IDEMGATE_RESET_LINK_BASE or the tenant's base says otherwise
// (config.ResetLinkBaseOrDefault).
const PagePath = "/reset-password"

// pageFiles is the page of PagePath: page.html, page.css and page.js
// (api.NewPage).
//
//go:embed page
var pageFiles embed.FS

// Config configures the routes.
type Config struct {
	// Resets redeems the tokens. Required.
	Resets store.ResetTokens
	// FailureRate and FailureBurst limit failed redeems per client
	// address: FailureBurst at once, then FailureRate per second. Defaults
	// DefaultFailureRate and DefaultFailureBurst; a negative rate disables
	// the limit.
	FailureRate  float64
	FailureBurst int
}

// Routes returns the api's password-reset routes on cfg (api.Config.Routes):
// POST RedeemPath, which consumes a token once and answers whose reset it
// is, and GET PagePath?token=…, a page whose button POSTs the token to it
// and shows the answer. Fetching the page redeems nothing, so a mail
// scanner that opens links does no harm.
func Routes(cfg *Config) api.Routes {
	return func(r chi.Router, kit *api.RouteKit) error {
		if cfg.Resets == nil {
			return errors.New("resetroute: Config.Resets is required")
		}
		page, err := api.NewPage(pageFiles, "page")
		if err != nil {
			return err
		}
		rate, burst := cfg.FailureRate, cfg.FailureBurst
		if rate == 0 {
			rate = DefaultFailureRate
		}
		if burst == 0 {
			burst = DefaultFailureBurst
		}
		h := &redeemer{resets: cfg.Resets, kit: kit, limit: api.NewFailureLimiter(rate, burst)}
		r.Post(RedeemPath, h.ServeHTTP)
		r.Get(PagePath, page.ServeHTTP)
		return nil
	}
}

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

// redeemer serves POST /v1/password-resets/redeem.
type redeemer struct {
	resets store.ResetTokens
	kit    *api.RouteKit
	// limit counts failed redeems per client address.
	limit *api.FailureLimiter
}

// refusal is why a redeem was refused: the problem and its status (0: the
// api's status of the code).
type refusal struct {
	status     int
	err        *vocab.Error
	retryAfter time.Duration
}

// ServeHTTP is POST /v1/password-resets/redeem: the token is the
// credential (no bearer token). It consumes the token once and answers
// whose reset it is; afterwards the token is reset_token_used. Failed
// redeems count against the client address (api.FailureLimiter).
func (h *redeemer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	client := h.kit.ClientAddr(r)
	if wait, blocked := h.limit.Blocked(client); blocked {
		h.kit.Problem(w, r, http.StatusTooManyRequests,
			vocab.Errorf(vocab.CodeRateLimited, "", "too many failed redeems from this address; retry after %s", wait.Round(time.Second)), wait)
		return
	}
	token, ref := decodeRedeem(r.Body)
	if ref == nil {
		var red *Redemption
		if red, ref = h.redeem(r, token); ref == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_ = json.NewEncoder(w).Encode(red)
			return
		}
	}
	switch ref.err.Code {
	case vocab.CodeInvalidArgument, vocab.CodeNotFound, vocab.CodeResetTokenUsed, vocab.CodeResetTokenExpired:
		h.limit.Failed(client)
	}
	h.kit.Problem(w, r, ref.status, ref.err, ref.retryAfter)
}

// redeem consumes token, or says why it cannot.
func (h *redeemer) redeem(r *http.Request, token string) (*Redemption, *refusal) {
	ctx, cancel := context.WithTimeout(r.Context(), h.kit.DBTimeout())
	defer cancel()
	requestID, logger := h.kit.RequestID(r), h.kit.Logger()
	red, err := h.resets.ResetTokenRedeem(ctx, resettoken.TokenHash(token))
	switch {
	case errors.Is(err, vocab.ErrAlreadyUsed):
		return nil, &refusal{err: vocab.Errorf(vocab.CodeResetTokenUsed, "token", "this password-reset link was already used")}
	case errors.Is(err, vocab.ErrExpired):
		return nil, &refusal{err: vocab.Errorf(vocab.CodeResetTokenExpired, "token", "this password-reset link has expired; ask for a new one")}
	case errors.Is(err, vocab.ErrNotFound):
		return nil, &refusal{err: vocab.Errorf(vocab.CodeNotFound, "token", "no such password-reset token")}
	case errors.Is(err, vocab.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
		logger.WarnContext(r.Context(), "database unavailable", "request_id", requestID, "error", err)
		return nil, &refusal{retryAfter: time.Second,
			err: vocab.Errorf(vocab.CodeUnavailable, "", "the database is unreachable; retry")}
	case err != nil:
		logger.ErrorContext(r.Context(), "redeem failed", "request_id", requestID, "error", err)
		return nil, &refusal{err: vocab.Errorf(vocab.CodeInternal, "", "internal error (request %s)", requestID)}
	}
	h.kit.LogCaller(r, red.TenantID, red.UserID)
	logger.InfoContext(r.Context(), "password-reset token redeemed", "request_id", requestID,
		"tenant", red.TenantID, "user", red.UserID, "operation_id", red.OperationID)
	return &Redemption{TenantID: red.TenantID, UserID: red.UserID, OperationID: red.OperationID}, nil
}

// decodeRedeem reads {"token": "…"}: one JSON object, no other member, a
// token of the shape resetmail issues. Its refusals are invalid_argument,
// 413 for a body over the limit, else 400.
func decodeRedeem(body io.Reader) (string, *refusal) {
	invalid := func(status int, field, format string, args ...any) *refusal {
		return &refusal{status: status, err: vocab.Errorf(vocab.CodeInvalidArgument, field, format, args...)}
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var req redeemRequest
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", invalid(http.StatusRequestEntityTooLarge, "body", "request body is larger than %d bytes", tooLarge.Limit)
		}
		return "", invalid(http.StatusBadRequest, "body", "want a JSON object {\"token\": \"…\"}: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", invalid(http.StatusBadRequest, "body", "unexpected data after the JSON object")
	}
	if !resettoken.WellFormed(req.Token) {
		return "", invalid(http.StatusBadRequest, "token", "must be the %d-character token of a reset link (copy the whole link)", resettoken.TokenLen)
	}
	return req.Token, nil
}
