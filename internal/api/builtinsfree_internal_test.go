package api

import (
	"context"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestServesNoPasswordResets: the api alone (no Config.Routes) serves
// neither the password-reset page nor its redeem route; the built-ins
// contribute them (internal/builtins/resetroute).
func TestServesNoPasswordResets(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	g, err := core.New(&core.Config{Store: pgengine.New(pool), Enqueuer: enqueueNothing{}})
	require.NoError(t, err)
	s, err := New(&Config{Gate: g, Auth: refuseAll{}, Tools: toolspec.NewRegistry(), Jobs: &jobs.Control[pgx.Tx]{}})
	require.NoError(t, err)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/reset-password"},
		{http.MethodGet, "/reset-password?token=x"},
		{http.MethodPost, "/v1/password-resets/redeem"},
	} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(c.method, c.path, strings.NewReader(`{"token":"x"}`)))
		require.Equal(t, http.StatusNotFound, w.Code, "%s %s", c.method, c.path)
	}
}

// TestNoPasswordResetsInTheAPI: no file of the package (its pages
// included, its tests not) names password resets. The only exception is
// the domain's codes in the status table, which maps every domain code.
func TestNoPasswordResetsInTheAPI(t *testing.T) {
	t.Parallel()
	allowed := strings.NewReplacer("vocab.coderesettokenused", "", "vocab.coderesettokenexpired", "")
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		text := allowed.Replace(strings.ToLower(string(raw)))
		for _, word := range []string{"reset", "redeem"} {
			require.NotContains(t, strings.ToLower(path), word, "a file of the api is named for password resets")
			require.NotContains(t, text, word, "%s mentions password resets: they belong to the built-ins (internal/builtins/resetroute)", path)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, checked, 20, "the package's files were read")
}

type refuseAll struct{}

func (refuseAll) Authenticate(context.Context, string) (vocab.Actor, error) {
	return vocab.Actor{}, vocab.ErrNotFound
}

type enqueueNothing struct{}

func (enqueueNothing) JobInsert(context.Context, core.Tx, *core.Claim) (int64, error) { return 0, nil }
