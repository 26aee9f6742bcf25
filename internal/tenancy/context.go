package tenancy

import (
	"context"

	"github.com/idemgate/idemgate/internal/vocab"
)

// actorKey is the context key of the authenticated actor.
type actorKey struct{}

// WithActor returns ctx carrying the actor a request was authenticated as.
func WithActor(ctx context.Context, actor vocab.Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFromContext returns the actor of an authenticated request: set by
// the api's authentication, read by the api and the operator routes.
func ActorFromContext(ctx context.Context) (vocab.Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(vocab.Actor)
	return a, ok
}
