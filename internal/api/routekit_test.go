package api_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// seen is what a contributed route saw of its kit.
type seen struct {
	RequestID string        `json:"request_id"`
	Client    string        `json:"client"`
	DBTimeout time.Duration `json:"db_timeout"`
}

// TestContributedRoutes: Config.Routes adds routes without authentication,
// behind the router's middleware, and the kit answers, names and logs as
// the api does.
func TestContributedRoutes(t *testing.T) {
	t.Parallel()
	st := unusedStore(t)
	g, err := core.New(&core.Config{Store: st, Enqueuer: noEnqueue{}})
	require.NoError(t, err)
	logger, logs := logtest.New()
	srv, err := api.New(&api.Config{Gate: g, Auth: noAuth{}, Tools: toolspec.NewRegistry(), Jobs: &jobs.Control[pgx.Tx]{},
		Logger: logger, DBTimeout: 7 * time.Second, MaxBodyBytes: 64,
		Routes: func(r chi.Router, kit *api.RouteKit) error {
			r.Get("/team/seen", func(w http.ResponseWriter, r *http.Request) {
				kit.LogCaller(r, "acme", "usr_7")
				_ = json.NewEncoder(w).Encode(seen{RequestID: kit.RequestID(r), Client: kit.ClientAddr(r), DBTimeout: kit.DBTimeout()})
			})
			r.Get("/team/missing", func(w http.ResponseWriter, r *http.Request) {
				kit.Problem(w, r, 0, vocab.Errorf(vocab.CodeNotFound, "thing", "no such thing"), 0)
			})
			r.Post("/team/busy", func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				kit.Problem(w, r, http.StatusTooManyRequests, vocab.Errorf(vocab.CodeRateLimited, "", "slow down"), 2*time.Second)
			})
			return nil
		}})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	resp, err := http.Get(hs.URL + "/team/seen")
	require.NoError(t, err)
	var s seen
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "no bearer token needed")
	require.Equal(t, resp.Header.Get("X-Request-Id"), s.RequestID)
	require.True(t, strings.HasPrefix(s.RequestID, "req_"), s.RequestID)
	require.Equal(t, "127.0.0.1", s.Client)
	require.Equal(t, 7*time.Second, s.DBTimeout)
	require.Contains(t, logs.String(), `"path":"/team/seen","status":200`)
	require.Contains(t, logs.String(), `"tenant":"acme","user":"usr_7"`, "the access log names the caller the route named")

	problem := func(resp *http.Response) (code vocab.Code, field string, status int) {
		t.Helper()
		defer resp.Body.Close()
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		var p struct {
			Status int `json:"status"`
			Error  struct {
				Code  vocab.Code `json:"code"`
				Field string     `json:"field"`
			} `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		return p.Error.Code, p.Error.Field, p.Status
	}
	resp, err = http.Get(hs.URL + "/team/missing")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "status 0: the api's status of the code")
	code, field, status := problem(resp)
	require.Equal(t, vocab.CodeNotFound, code)
	require.Equal(t, "thing", field)
	require.Equal(t, http.StatusNotFound, status)

	resp, err = http.Post(hs.URL+"/team/busy", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "2", resp.Header.Get("Retry-After"))
	code, _, _ = problem(resp)
	require.Equal(t, vocab.CodeRateLimited, code)

	// The body limit holds before the route.
	resp, err = http.Post(hs.URL+"/team/busy", "application/json", strings.NewReader(strings.Repeat("x", 65)))
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	code, _, _ = problem(resp)
	require.Equal(t, vocab.CodeInvalidArgument, code)

	// A failing Routes stops New.
	_, err = api.New(&api.Config{Gate: g, Auth: noAuth{}, Tools: toolspec.NewRegistry(), Jobs: &jobs.Control[pgx.Tx]{},
		Routes: func(chi.Router, *api.RouteKit) error { return errors.New("no page") }})
	require.ErrorContains(t, err, "no page")
}

// TestNewPage builds a page from files: style and script inline, each
// allowed by its hash, the api's headers; a missing file is an error.
func TestNewPage(t *testing.T) {
	t.Parallel()
	files := fstest.MapFS{
		"p/page.html": {Data: []byte("<style>{{STYLE}}</style><script>{{SCRIPT}}</script>")},
		"p/page.css":  {Data: []byte("b{}")},
		"p/page.js":   {Data: []byte("1")},
	}
	page, err := api.NewPage(files, "p")
	require.NoError(t, err)
	w := httptest.NewRecorder()
	page.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/p", nil))
	require.Equal(t, "<style>b{}</style><script>1</script>", w.Body.String())
	// sha256("1") and sha256("b{}"), base64.
	require.Equal(t, "default-src 'none'; script-src 'sha256-a4ayc/80/OGda4BO/1o/V0etpOqiLx1JwB5S3beHW0s='; style-src 'sha256-"+
		"7yqHVAesot11p6HczDsgKRipvI5UPgs97z80zNXlans='; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		w.Header().Get("Content-Security-Policy"))
	for k, v := range map[string]string{"Content-Type": "text/html; charset=utf-8", "Referrer-Policy": "no-referrer",
		"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"} {
		require.Equal(t, v, w.Header().Get(k), k)
	}

	delete(files, "p/page.js")
	_, err = api.NewPage(files, "p")
	require.ErrorContains(t, err, "page.js")
}
