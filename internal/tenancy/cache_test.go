package tenancy

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/store"
)

// everyToken says every hash is a live token of tenant acme.
type everyToken struct{ store.Tokens }

func (everyToken) TokenGetByHash(_ context.Context, hash []byte) (*store.Token, error) {
	return &store.Token{ID: "tok_0000000000000000", TenantID: "acme", UserID: "u", Scopes: []string{ScopeOpsAdmin},
		Hash: append([]byte(nil), hash...)}, nil
}

func TestCacheIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	a := NewAuthenticator(everyToken{}, time.Hour, func() time.Time { return now })
	ctx := t.Context()

	for i := range TokenCacheSize + 10 {
		_, err := a.Authenticate(ctx, "idg_bounded_"+strconv.Itoa(i))
		require.NoError(t, err)
		require.LessOrEqual(t, len(a.cache), TokenCacheSize)
	}
	// Full of fresh entries: the cache was dropped and refilled.
	require.Equal(t, 10, len(a.cache))

	// Full with stale entries: only those go.
	b := NewAuthenticator(everyToken{}, time.Second, func() time.Time { return now })
	for i := range TokenCacheSize {
		_, err := b.Authenticate(ctx, "idg_bounded_"+strconv.Itoa(i))
		require.NoError(t, err)
	}
	require.Equal(t, TokenCacheSize, len(b.cache))
	now = now.Add(2 * time.Second)
	_, err := b.Authenticate(ctx, "idg_bounded_new")
	require.NoError(t, err)
	require.Equal(t, 1, len(b.cache))
}
