package idemgate_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/builtins"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/config"
)

// handConfig is a Config written in code on a fresh SQLite file, the
// built-ins' Stripe and SMTP pointed at the test's stripe-mock and Mailpit
// when scripts/test.sh started them, at the defaults otherwise: nothing is
// read from STRIPE_API_BASE, SMTP_ADDR or MAIL_FROM.
func handConfig(t *testing.T) *idemgate.Config {
	t.Helper()
	cfg := idemgate.DefaultConfig()
	cfg.DatabaseURL = "sqlite:" + filepath.Join(t.TempDir(), "hand.db")
	cfg.LogLevel = slog.LevelError
	cfg.Wait = 10 * time.Second
	cfg.Secret = "3f9c1a7e5b2d8046f1e3a9c7b5d20486e1f3a5c7b9d0e2f4"
	cfg.StripeAPIKey = "sk_test_hand"
	if u := os.Getenv("STRIPE_MOCK_URL"); u != "" {
		cfg.StripeAPIBase = u
	}
	if a := os.Getenv("MAILPIT_SMTP_ADDR"); a != "" {
		cfg.SMTPAddr = a
	}
	cfg.MailFrom = "Hand <hand@example.com>"
	return cfg
}

// A Config written in code needs no environment: with the built-in tools'
// variables set to nonsense, DefaultConfig and Open ignore them, and the
// service (built-ins on) migrates, runs and is ready.
func TestHandWrittenConfigNeedsNoEnvironment(t *testing.T) {
	for _, k := range []string{config.EnvStripeAPIBase, config.EnvSMTPAddr, config.EnvMailFrom, config.EnvWait} {
		t.Setenv(k, "not a valid value")
	}
	def := idemgate.DefaultConfig()
	require.Equal(t, config.DefaultStripeAPIBase, def.StripeAPIBase)
	require.Equal(t, config.DefaultSMTPAddr, def.SMTPAddr)
	require.Equal(t, config.DefaultMailFrom, def.MailFrom)
	require.Equal(t, config.DefaultWait, def.Wait)

	svc := runConfig(t, handConfig(t), gate.NewRegistry().MustAdd(addNote), &idemgate.Options{Builtins: builtins.Tools()})
	srv := httptest.NewServer(svc.HealthHandler())
	t.Cleanup(srv.Close)
	body, status := get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusOK, status, body)
}

// Open checks a Config written in code and names each bad field, with the
// variable and flag that would set it.
func TestOpenNamesInvalidFields(t *testing.T) {
	t.Parallel()
	cfg := handConfig(t)
	cfg.Wait = -time.Second
	cfg.RateBurst = 0
	cfg.DBPooler = "sometimes"
	_, err := idemgate.Open(t.Context(), cfg, gate.NewRegistry(), nil)
	require.Error(t, err)
	for _, want := range []string{"Config.Wait: IDEMGATE_WAIT (--wait)", "Config.RateBurst: IDEMGATE_RATE_BURST", "Config.DBPooler: IDEMGATE_DB_POOLER"} {
		require.ErrorContains(t, err, want)
	}
	var se *config.SettingError
	require.ErrorAs(t, err, &se, "each error still unwraps to the setting's")

	// The zero Config is not the defaults: Open says which fields to set.
	_, err = idemgate.Open(t.Context(), &idemgate.Config{}, gate.NewRegistry(), nil)
	require.ErrorContains(t, err, "Config.InflightTimeout")
}

// ErrHelp is the root package's own error: errors.Is works on
// LoadConfig's answer to -h, whose text names no internal package.
func TestLoadConfigHelp(t *testing.T) {
	stdout := os.Stdout
	r, w, err := os.Pipe()
	require.NoError(t, err)
	os.Stdout = w
	_, err = idemgate.LoadConfig([]string{"-h"})
	os.Stdout = stdout
	require.NoError(t, w.Close())
	help, _ := io.ReadAll(r)
	require.ErrorIs(t, err, idemgate.ErrHelp)
	require.NotErrorIs(t, err, config.ErrHelp)
	require.Contains(t, string(help), "--database-url")
	require.False(t, errors.Is(idemgate.ErrHelp, config.ErrHelp))
}

// HealthHandler serves /healthz, /readyz and /metrics unauthenticated
// under a team's own prefix; with Options.HealthApart the main handler no
// longer serves them, and its authenticated routes work as before.
func TestHealthHandlerApart(t *testing.T) {
	t.Parallel()
	svc := runConfig(t, handConfig(t), gate.NewRegistry().MustAdd(addNote), &idemgate.Options{HealthApart: true})
	token, err := svc.CreateToken(t.Context(), "acme", "bot", "notes:write")
	require.NoError(t, err)

	r := chi.NewRouter()
	r.Mount("/internal", svc.HealthHandler())
	r.Mount("/", svc)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	body, status := get(t, srv.URL+"/internal/healthz")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "ok\n", body)
	body, status = get(t, srv.URL+"/internal/readyz")
	require.Equal(t, http.StatusOK, status, body)
	body, status = get(t, srv.URL+"/internal/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "idemgate_claims")
	_, status = get(t, srv.URL+"/internal/mcp")
	require.Equal(t, http.StatusNotFound, status, "the health handler serves nothing else")

	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		_, status = get(t, srv.URL+p)
		require.Equal(t, http.StatusNotFound, status, "%s on the main handler with HealthApart", p)
	}
	status, ans := callJSON(t, http.MethodPost, srv.URL+"/v1/tools/add_note", token, "apart-note-01", `{"text":"hi"}`)
	require.Equal(t, http.StatusOK, status, "%v", ans)
	_, status = get(t, srv.URL+"/v1/operations")
	require.Equal(t, http.StatusUnauthorized, status, "the main handler still authenticates")
}

// Without HealthApart the main handler keeps the health routes (as
// cmd/api serves them), and HealthHandler serves them too.
func TestHealthHandlerBeside(t *testing.T) {
	t.Parallel()
	svc := runConfig(t, handConfig(t), gate.NewRegistry().MustAdd(addNote), nil)
	main := httptest.NewServer(svc)
	t.Cleanup(main.Close)
	health := httptest.NewServer(http.StripPrefix("/x", svc.HealthHandler()))
	t.Cleanup(health.Close)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		for _, url := range []string{main.URL + p, health.URL + "/x" + p} {
			// /readyz reads the database: on a loaded machine SQLite's one
			// writer may keep it past its bound once; ready is asked again
			// (a probe's retry), for at most a minute.
			body, status := get(t, url)
			for deadline := time.Now().Add(time.Minute); status == http.StatusServiceUnavailable && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond) // the probe's pace
				body, status = get(t, url)
			}
			require.Equal(t, http.StatusOK, status, "%s: %s", p, body)
		}
	}
}

// get fetches url without credentials.
func get(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b), resp.StatusCode
}
