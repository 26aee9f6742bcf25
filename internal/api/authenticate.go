package api

import (
	"context"
	"net/http"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Authenticate is the api's bearer authentication as middleware, for routes
// mounted beside the api's own (the operator routes): 401 without a valid
// token (no audit row), 503 when it cannot tell; otherwise the actor is in
// the request's context (ActorFromContext). Scope checks are the caller's.
func (s *Server) Authenticate(next http.Handler) http.Handler { return s.authenticate(next) }

// withCaller returns ctx carrying actor as the api reads it
// (ActorFromContext), as a team's own handlers read it
// (domain.CallerFromContext), and as go-sdk's tools read it (the
// auth.TokenInfo the Streamable HTTP handler puts in a request's Extra:
// the user id and the scopes, no expiry).
func withCaller(ctx context.Context, actor vocab.Actor) context.Context {
	ctx = tenancy.WithActor(ctx, actor)
	ctx = domain.ContextWithCaller(ctx, domain.Caller{TenantID: actor.TenantID, UserID: actor.UserID, Scopes: slices.Clone(actor.Scopes)})
	return withTokenInfo(ctx, &auth.TokenInfo{UserID: actor.UserID, Scopes: slices.Clone(actor.Scopes),
		Extra: map[string]any{"tenant_id": actor.TenantID}})
}

// withTokenInfo returns ctx carrying info where auth.TokenInfoFromContext
// finds it. go-sdk sets that context key only in auth.RequireBearerToken,
// so the middleware runs once on a request of its own, with a verifier
// that answers info.
func withTokenInfo(ctx context.Context, info *auth.TokenInfo) context.Context {
	out := ctx
	verify := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) { return info, nil }
	capture := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { out = r.Context() })
	r := (&http.Request{Header: http.Header{"Authorization": {"Bearer verified"}}}).WithContext(ctx)
	auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(capture).ServeHTTP(nil, r)
	return out
}
