package resetroute_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/builtins/resetroute"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

// fakeResets is an in-memory store.ResetTokens: tokens by hash, each
// redeemable once unless expired; err, when set, is every answer.
type fakeResets struct {
	mu      sync.Mutex
	tokens  map[string]*fakeToken
	err     error
	redeems int
}

type fakeToken struct {
	red           store.ResetTokenRedemption
	used, expired bool
}

func (f *fakeResets) add(token string, red store.ResetTokenRedemption, expired bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[string(resetmail.TokenHash(token))] = &fakeToken{red: red, expired: expired}
}

func (f *fakeResets) ResetTokenRedeem(_ context.Context, hash []byte) (*store.ResetTokenRedemption, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.redeems++
	if f.err != nil {
		return nil, f.err
	}
	t, ok := f.tokens[string(hash)]
	switch {
	case !ok:
		return nil, vocab.ErrNotFound
	case t.used:
		return nil, vocab.ErrAlreadyUsed
	case t.expired:
		return nil, vocab.ErrExpired
	}
	t.used = true
	red := t.red
	return &red, nil
}

// resetToken returns a well-formed token, the same for the same n.
func resetToken(n int) string {
	return resetmail.Token([]byte("secret"), fmt.Sprintf("idg_test_%d", n))
}

// serveResets serves an api whose only contributed routes are those of
// Routes on f (the rest unused) and returns its URL.
func serveResets(t *testing.T, f *fakeResets, edit func(*resetroute.Config)) string {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	g, err := core.New(&core.Config{Store: pgengine.New(pool), Enqueuer: noEnqueue{}})
	require.NoError(t, err)
	rc := &resetroute.Config{Resets: f}
	if edit != nil {
		edit(rc)
	}
	s, err := api.New(&api.Config{Gate: g, Auth: noAuth{}, Tools: toolspec.NewRegistry(), Jobs: &jobs.Control[pgx.Tx]{},
		MaxBodyBytes: 1024, Routes: resetroute.Routes(rc)})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

type noAuth struct{}

func (noAuth) Authenticate(context.Context, string) (vocab.Actor, error) {
	return vocab.Actor{}, vocab.ErrNotFound
}

type noEnqueue struct{}

func (noEnqueue) JobInsert(context.Context, core.Tx, *core.Claim) (int64, error) { return 0, nil }

type redeemAnswer struct {
	status     int
	header     http.Header
	redemption resetroute.Redemption
	code       vocab.Code
	field      string
}

// redeem POSTs body to the redeem route, without a bearer token.
func redeem(t *testing.T, url, body string) redeemAnswer {
	t.Helper()
	resp, err := http.Post(url+resetroute.RedeemPath, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := redeemAnswer{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusRequestEntityTooLarge { // refused by the api's body limit, before the route
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	}
	if resp.StatusCode == http.StatusOK {
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.NoError(t, json.Unmarshal(raw, &a.redemption))
		return a
	}
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), string(raw))
	var p struct {
		Status int `json:"status"`
		Error  struct {
			Code  vocab.Code `json:"code"`
			Field string     `json:"field"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(raw, &p), string(raw))
	require.Equal(t, resp.StatusCode, p.Status)
	a.code, a.field = p.Error.Code, p.Error.Field
	return a
}

func tokenBody(token string) string { return `{"token":"` + token + `"}` }

func TestRedeemOnceThenGone(t *testing.T) {
	t.Parallel()
	f := &fakeResets{tokens: map[string]*fakeToken{}}
	f.add(resetToken(1), store.ResetTokenRedemption{TenantID: "acme", UserID: "usr_1", OperationID: "op_1"}, false)
	f.add(resetToken(2), store.ResetTokenRedemption{TenantID: "acme", UserID: "usr_2", OperationID: "op_2"}, true)
	url := serveResets(t, f, nil)

	a := redeem(t, url, tokenBody(resetToken(1)))
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, resetroute.Redemption{TenantID: "acme", UserID: "usr_1", OperationID: "op_1"}, a.redemption)
	for range 2 {
		a = redeem(t, url, tokenBody(resetToken(1)))
		require.Equal(t, http.StatusGone, a.status)
		require.Equal(t, vocab.CodeResetTokenUsed, a.code)
		require.Equal(t, "token", a.field)
	}
	a = redeem(t, url, tokenBody(resetToken(2)))
	require.Equal(t, http.StatusGone, a.status)
	require.Equal(t, vocab.CodeResetTokenExpired, a.code)
	a = redeem(t, url, tokenBody(resetToken(3)))
	require.Equal(t, http.StatusNotFound, a.status)
	require.Equal(t, vocab.CodeNotFound, a.code)
}

func TestRedeemRefusesMalformedRequests(t *testing.T) {
	t.Parallel()
	f := &fakeResets{tokens: map[string]*fakeToken{}}
	url := serveResets(t, f, nil)
	for body, field := range map[string]string{
		``:             "body",
		`[]`:           "body",
		`{"token": 1}`: "body",
		`{"token": "` + resetToken(1) + `", "user_id": "usr_1"}`: "body",
		tokenBody(resetToken(1)) + ` {}`:                         "body",
		`{}`:                                                     "token",
		tokenBody(resetToken(1)[1:]):                             "token",
		tokenBody(resetToken(1)[1:] + "+"):                       "token",
		tokenBody(resetToken(1) + "A"):                           "token",
	} {
		a := redeem(t, url, body)
		require.Equal(t, http.StatusBadRequest, a.status, body)
		require.Equal(t, vocab.CodeInvalidArgument, a.code, body)
		require.Equal(t, field, a.field, body)
	}
	a := redeem(t, url, tokenBody(strings.Repeat("A", 2000)))
	require.Equal(t, http.StatusRequestEntityTooLarge, a.status)
	require.Equal(t, vocab.CodeInvalidArgument, a.code)
	require.Zero(t, f.redeems, "no malformed request reached the store")
}

func TestRedeemStoreErrors(t *testing.T) {
	t.Parallel()
	f := &fakeResets{err: fmt.Errorf("%w: connection refused", vocab.ErrUnavailable)}
	url := serveResets(t, f, nil)
	a := redeem(t, url, tokenBody(resetToken(1)))
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Equal(t, vocab.CodeUnavailable, a.code)
	require.Equal(t, "1", a.header.Get("Retry-After"))

	f.mu.Lock()
	f.err = fmt.Errorf("disk on fire")
	f.mu.Unlock()
	a = redeem(t, url, tokenBody(resetToken(1)))
	require.Equal(t, http.StatusInternalServerError, a.status)
	require.Equal(t, vocab.CodeInternal, a.code)
}

// TestRedeemFailuresAreLimitedPerAddress: past the burst of failures an
// address is refused unchecked, successes included, until failures refill
// (at one an hour here, so no refill happens during the test).
func TestRedeemFailuresAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	f := &fakeResets{tokens: map[string]*fakeToken{}}
	f.add(resetToken(1), store.ResetTokenRedemption{TenantID: "acme", UserID: "usr_1", OperationID: "op_1"}, false)
	url := serveResets(t, f, func(c *resetroute.Config) { c.FailureRate, c.FailureBurst = 1.0/3600, 3 })

	// Successes cost nothing.
	require.Equal(t, http.StatusOK, redeem(t, url, tokenBody(resetToken(1))).status)
	require.Equal(t, http.StatusGone, redeem(t, url, tokenBody(resetToken(1))).status)
	require.Equal(t, http.StatusNotFound, redeem(t, url, tokenBody(resetToken(2))).status)
	require.Equal(t, http.StatusBadRequest, redeem(t, url, `{}`).status)
	before := f.redeems
	a := redeem(t, url, tokenBody(resetToken(3)))
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Equal(t, vocab.CodeRateLimited, a.code)
	retry, err := time.ParseDuration(a.header.Get("Retry-After") + "s")
	require.NoError(t, err)
	require.Greater(t, retry, time.Hour-time.Minute)
	require.Equal(t, before, f.redeems, "a refused address does not reach the store")

	// A negative rate turns the limit off.
	off := serveResets(t, f, func(c *resetroute.Config) { c.FailureRate = -1 })
	for range 30 {
		require.Equal(t, http.StatusNotFound, redeem(t, off, tokenBody(resetToken(4))).status)
	}
}

func TestResetPage(t *testing.T) {
	t.Parallel()
	url := serveResets(t, &fakeResets{tokens: map[string]*fakeToken{}}, nil)
	resp, err := http.Get(url + resetroute.PagePath + "?token=" + resetToken(1))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
	if resp.StatusCode != http.StatusRequestEntityTooLarge { // refused by the api's body limit, before the route
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	}
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "script-src 'sha256-")
	require.Contains(t, csp, "connect-src 'self'")
	page := string(body)
	require.Contains(t, page, `<form id="redeem-form">`)
	require.Contains(t, page, `<button id="redeem" type="submit">`)
	require.Contains(t, page, resetroute.RedeemPath)
	require.NotContains(t, page, "{{", "every placeholder filled")
	require.NotContains(t, page, resetToken(1), "the page reads the token from its URL, not from the server")
	for _, external := range []string{"src=", "href=", "@import", "url("} {
		require.NotContains(t, page, external, "no external assets")
	}

}

// TestRoutesNeedResets: Routes without a redeemer stops the api's start.
func TestRoutesNeedResets(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	g, err := core.New(&core.Config{Store: pgengine.New(pool), Enqueuer: noEnqueue{}})
	require.NoError(t, err)
	_, err = api.New(&api.Config{Gate: g, Auth: noAuth{}, Tools: toolspec.NewRegistry(), Jobs: &jobs.Control[pgx.Tx]{},
		Routes: resetroute.Routes(&resetroute.Config{})})
	require.ErrorContains(t, err, "Config.Resets is required")
}

// TestMailsLinkToThePage: the default link base of the configuration is
// this page on the api.
func TestMailsLinkToThePage(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	require.Equal(t, cfg.PublicURLOrDefault()+resetroute.PagePath, cfg.ResetLinkBaseOrDefault())
}
