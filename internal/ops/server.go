package ops

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"riverqueue.com/riverui"
	"riverqueue.com/riverui/uiendpoints"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Paths of the operator routes.
const (
	// RiverUIPath is where River UI is served (its API under RiverUIPath/api).
	RiverUIPath = "/ops/riverui"
	// RedrivePath re-drives one failed operation: POST a RedriveRequest.
	RedrivePath = "/ops/redrive"
)

// Config configures a Server.
type Config struct {
	// Auth authenticates operators. Required.
	Auth *Auth
	// Redriver serves POST /ops/redrive, and River UI's Retry of a failed
	// operation's job. Required.
	Redriver *Redriver
	// JobClaims finds the operation a River job runs, so that River UI's
	// Retry of a failed operation's job re-drives it through the gate in
	// the operator's name. Required.
	JobClaims JobClaims
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Server is the operator routes: River UI and the re-drive route, behind
// operator authentication and Go's cross-origin protection (a browser
// holding Basic credentials cannot be made to retry, cancel or re-drive by
// another site).
type Server struct {
	ui        *riverui.Handler
	redriver  *Redriver
	jobClaims JobClaims
	logger    *slog.Logger
	handler   http.Handler
}

// NewServer returns the operator routes. ui is River UI's endpoints on a
// River client of its own (riverui.NewEndpoints): an insert-only one (no
// queues, no workers) where the api's worker runs apart.
func NewServer(cfg *Config, ui uiendpoints.Bundle) (*Server, error) {
	if cfg.Auth == nil || cfg.Redriver == nil || cfg.JobClaims == nil || ui == nil {
		return nil, errors.New("ops: Config.Auth, Config.Redriver, Config.JobClaims and River UI's endpoints are required")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	handler, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: ui,
		Logger:    logger.With("component", "riverui"),
		Prefix:    RiverUIPath,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{ui: handler, redriver: cfg.Redriver, jobClaims: cfg.JobClaims, logger: logger}

	r := chi.NewRouter()
	r.Use(http.NewCrossOriginProtection().Handler, securityHeaders, cfg.Auth.Middleware, s.logMutations)
	// River UI strips RiverUIPath itself and redirects RiverUIPath to
	// RiverUIPath/.
	r.With(deploymentOperator).Handle("/riverui", handler)
	r.With(deploymentOperator).Handle("/riverui/*", handler)
	r.With(deploymentOperator).Post("/riverui/api/jobs/retry", s.retry)
	r.Post("/redrive", s.redrive)
	s.handler = r
	return s, nil
}

// deploymentOperator refuses River UI to tenant operators: River UI shows
// and changes every tenant's jobs, so it takes a deployment operator
// (Operator.Deployment). Other ops:admin tokens may re-drive their own
// tenant's operations only.
func deploymentOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if op, ok := OperatorFromContext(r.Context()); !ok || !op.Deployment {
			writeProblem(w, r, http.StatusForbidden, vocab.CodeForbidden,
				"River UI shows every tenant's jobs: it needs the operator Basic credentials, an "+tenancy.ScopeOpsAdmin+
					" token of the operator tenant, or an access token whose subject is listed in IDEMGATE_OPS_SUBJECTS")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Start starts River UI's background services (its cached job counts)
// until ctx ends. Requests are served without it, counting on demand.
func (s *Server) Start(ctx context.Context) error { return s.ui.Start(ctx) }

// Mount mounts the operator routes under /ops on r.
func (s *Server) Mount(r chi.Router) { r.Mount("/ops", s.handler) }

// securityHeaders keeps the operator pages out of frames (no clickjacking
// of River UI's buttons) and their URLs out of other sites' Referer.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// logMutations logs who changed what (River UI's retry, cancel, delete,
// queue pause; re-drives), never credentials.
func (s *Server) logMutations(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			op, _ := OperatorFromContext(r.Context())
			s.logger.InfoContext(r.Context(), "ops: operator request", "operator", op.Name, "via", op.Via,
				"tenant", op.TenantID, "method", r.Method, "path", r.URL.Path)
		}
		next.ServeHTTP(w, r)
	})
}

// RedriveRequest is the body of POST /ops/redrive.
type RedriveRequest struct {
	// Tenant is required for a deployment operator (Operator.Deployment);
	// for a tenant's own ops:admin token it is the token's tenant (another
	// one is forbidden).
	Tenant         string `json:"tenant"`
	Tool           string `json:"tool"`
	IdempotencyKey string `json:"idempotency_key"`
	Reason         string `json:"reason"`
	DryRun         bool   `json:"dry_run"`
}

// redrive serves POST /ops/redrive: 200 with the RedriveLine when
// re-driven (or, for a dry run, would be), 409 with it when refused, 404
// for an unknown operation.
func (s *Server) redrive(w http.ResponseWriter, r *http.Request) {
	op, _ := OperatorFromContext(r.Context())
	var req RedriveRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeProblem(w, r, http.StatusBadRequest, vocab.CodeInvalidArgument, "body: "+err.Error())
		return
	}
	switch {
	case !op.Deployment && req.Tenant == "":
		req.Tenant = op.TenantID
	case !op.Deployment && req.Tenant != op.TenantID:
		writeProblem(w, r, http.StatusForbidden, vocab.CodeForbidden, "the token's tenant is "+op.TenantID)
		return
	case req.Tenant == "":
		writeProblem(w, r, http.StatusBadRequest, vocab.CodeInvalidArgument, "tenant is required")
		return
	}
	if req.Tool == "" || req.IdempotencyKey == "" {
		writeProblem(w, r, http.StatusBadRequest, vocab.CodeInvalidArgument, "tool and idempotency_key are required")
		return
	}
	if err := domain.CheckID(req.Tenant); err != nil {
		writeProblem(w, r, http.StatusBadRequest, vocab.CodeInvalidArgument, "tenant: "+err.Error())
		return
	}
	for _, f := range []struct{ name, v string }{{"tool", req.Tool}, {"idempotency_key", req.IdempotencyKey}} {
		if strings.ContainsFunc(f.v, unicode.IsControl) || !utf8.ValidString(f.v) || len(f.v) > 255 {
			writeProblem(w, r, http.StatusBadRequest, vocab.CodeInvalidArgument, f.name+" must be printable text of at most 255 bytes")
			return
		}
	}
	if err := ValidateReason(req.Reason); err != nil {
		writeProblem(w, r, http.StatusBadRequest, vocab.CodeInvalidArgument, err.Error())
		return
	}
	line, err := s.redriver.Redrive(r.Context(), &RedriveParams{
		TenantID: req.Tenant, Tool: req.Tool, Key: req.IdempotencyKey,
		Operator: op.Name, Via: op.Channel(ChannelRedrive), Reason: req.Reason, DryRun: req.DryRun,
	})
	switch {
	case Refused(err):
		writeJSON(w, http.StatusConflict, line)
	case errors.Is(err, vocab.ErrNotFound):
		writeProblem(w, r, http.StatusNotFound, vocab.CodeNotFound, "no operation "+req.Tool+"/"+req.IdempotencyKey+" in tenant "+req.Tenant)
	case err != nil:
		s.logger.ErrorContext(r.Context(), "ops: re-drive failed", "tool", req.Tool, "error", err)
		writeProblem(w, r, http.StatusServiceUnavailable, vocab.CodeUnavailable, "the re-drive did not complete; try again")
	default:
		s.logger.InfoContext(r.Context(), "ops: re-drive", "operator", op.Name, "via", op.Via, "tenant", req.Tenant, "tool", req.Tool,
			"operation_id", line.OperationID, "action", line.Action, "next_generation", line.NextGeneration)
		writeJSON(w, http.StatusOK, line)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
