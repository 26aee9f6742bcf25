package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// approverAuth takes every bearer token for acme's fin-lead, who may
// decide on approvals; a request without one is refused.
type approverAuth struct{}

func (approverAuth) Authenticate(context.Context, string) (vocab.Actor, error) {
	return vocab.Actor{TenantID: "acme", UserID: "fin-lead", Scopes: []string{tokenspec.ScopeApprovalsDecide}}, nil
}

// serveApprovals serves the api with approverAuth on a store that never
// connects: what these tests reach must be answered before the store.
func serveApprovals(t *testing.T) string {
	t.Helper()
	st := unusedStore(t)
	g, err := core.New(&core.Config{Store: st, Enqueuer: noEnqueue{}, Policies: coretest.Policies()})
	require.NoError(t, err)
	s, err := api.New(&api.Config{Gate: g, Auth: approverAuth{}, Tools: builtinTools(t, st), Jobs: &jobs.Control[pgx.Tx]{},
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

type decideAnswer struct {
	status int
	header http.Header
	body   map[string]any
}

// decide POSTs body with contentType (none when empty) and header to
// POST /v1/approvals/01a24920-7f63-7d9d-915a-30c79c817c73, with a bearer token.
func decide(t *testing.T, url, contentType, body string, header map[string]string) decideAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/approvals/01a24920-7f63-7d9d-915a-30c79c817c73", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer idg_any")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := decideAnswer{status: resp.StatusCode, header: resp.Header}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a.body))
	return a
}

// A decision is JSON only: the bodies an HTML form can send (urlencoded,
// multipart, text/plain, even one that parses as JSON) are refused with
// 415 naming the Content-Type, before the decision is read.
func TestDecideRefusesNonJSONBodies(t *testing.T) {
	t.Parallel()
	url := serveApprovals(t)
	jsonLike := `{"decision":"approve","args_hash":"abc","x":"="}` // what a text/plain form can forge
	for _, ct := range []string{"", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain",
		"text/plain;charset=UTF-8", "application/jsonp", "application/problem+json", "json", "application/json;;"} {
		t.Run(ct, func(t *testing.T) {
			t.Parallel()
			a := decide(t, url, ct, jsonLike, nil)
			require.Equal(t, http.StatusUnsupportedMediaType, a.status, "%v", a.body)
			require.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
			require.Equal(t, "invalid_argument", a.body["title"])
			require.Contains(t, a.body["detail"], "application/json")
			errBody := a.body["error"].(map[string]any)
			require.Equal(t, "Content-Type", errBody["field"])
			require.Contains(t, errBody["message"], "Content-Type must be application/json")
		})
	}

	// JSON, with or without parameters, gets to the decision (refused here
	// for its missing fingerprint, before the store).
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
		a := decide(t, url, ct, `{"decision":"approve"}`, nil)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s: %v", ct, a.body)
		require.Equal(t, "args_hash", a.body["error"].(map[string]any)["field"])
	}
}

// The approval routes take the Origin rule of the REST routes: a page of
// another site is refused before authentication; the api's own page is
// served.
func TestApprovalRoutesCheckOrigin(t *testing.T) {
	t.Parallel()
	url := serveApprovals(t)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, err := http.NewRequest(method, url+"/v1/approvals/01a24920-7f63-7d9d-915a-30c79c817c73", strings.NewReader(`{"decision":"approve","args_hash":"abc"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://evil.example.com")
		resp, err := http.DefaultClient.Do(req) // no token: the Origin is refused first
		require.NoError(t, err)
		var p map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %v", method, p)
		require.Equal(t, "Origin", p["error"].(map[string]any)["field"])
	}
	a := decide(t, url, "application/json", `{"decision":"approve"}`, map[string]string{"Origin": url})
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "the api's own origin is served: %v", a.body)
}
