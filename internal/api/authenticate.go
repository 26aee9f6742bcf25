package api

import "net/http"

// Authenticate is the api's bearer authentication as middleware, for routes
// mounted beside the api's own (the operator routes): 401 without a valid
// token (no audit row), 503 when it cannot tell; otherwise the actor is in
// the request's context (ActorFromContext). Scope checks are the caller's.
func (s *Server) Authenticate(next http.Handler) http.Handler { return s.authenticate(next) }
