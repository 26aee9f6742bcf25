package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/vocab"
)

// Routes adds the unauthenticated routes a tool set contributes beside the
// api's own (Config.Routes): on r, behind the router's middleware (tracing,
// request id, access log, panic recovery, the body limit) but not the
// Origin check or authentication, which such a route does by itself if
// at all. kit is what the route may use of the server. An error stops New.
type Routes func(r chi.Router, kit *RouteKit) error

// RouteKit is what a contributed route (Routes) gets from the server, so
// that it answers, logs and limits as the api's own routes do. Beside it,
// NewFailureLimiter limits a client's failures and NewPage serves a static
// page.
type RouteKit struct {
	s *Server
}

// Logger returns the server's logger.
func (k *RouteKit) Logger() *slog.Logger { return k.s.logger }

// DBTimeout returns the bound on one database call (Config.DBTimeout).
func (k *RouteKit) DBTimeout() time.Duration { return k.s.dbTimeout }

// Registerer returns the registry the api's metrics are in, for a route's
// own metrics (served on /metrics with the api's).
func (k *RouteKit) Registerer() prometheus.Registerer { return k.s.registerer }

// Problem answers err as application/problem+json (docs/errors.md) with
// status, or, when status is 0, the status the api's REST routes answer
// err's code with; a positive retryAfter sets Retry-After and the body's
// retry_after_ms.
func (k *RouteKit) Problem(w http.ResponseWriter, r *http.Request, status int, err *vocab.Error, retryAfter time.Duration) {
	if status == 0 {
		status = statusFor(err.Code)
	}
	writeProblem(w, r, status, &callError{err: err, retryAfter: retryAfter})
}

// ClientAddr returns r's client address as the api's limits count it: the
// TCP peer without the port; forwarded headers are not trusted.
func (k *RouteKit) ClientAddr(r *http.Request) string { return clientAddr(r) }

// RequestID returns the id the api gave r (its X-Request-Id answer).
func (k *RouteKit) RequestID(r *http.Request) string { return RequestIDFromContext(r.Context()) }

// LogCaller names the tenant and user on r's access-log line, as
// authentication does on the api's own routes.
func (k *RouteKit) LogCaller(r *http.Request, tenant, user string) {
	setLogCaller(r.Context(), tenant, user)
}

// setLogCaller names tenant and user on the access-log line of the request
// of ctx.
func setLogCaller(ctx context.Context, tenant, user string) {
	if info, ok := ctx.Value(requestLogKey).(*requestLog); ok {
		info.tenant, info.user = tenant, user
	}
}
