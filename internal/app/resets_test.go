package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/builtins/resetroute"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

// resetStore is what these tests write reset tokens with.
type resetStore interface {
	store.Seeder
	Begin(ctx context.Context) (core.Tx, error)
}

// resetBundle is an api on one engine with acme's usr_1 seeded.
type resetBundle struct {
	url   string
	store resetStore
}

func setupResetsPostgres(t *testing.T) *resetBundle {
	t.Helper()
	b := setup(t, nil)
	return seedResetUser(t, &resetBundle{url: b.url, store: pgengine.New(b.pool)})
}

func setupResetsSQLite(t *testing.T) *resetBundle {
	t.Helper()
	path, db := sqlitetest.NewDB(t)
	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	cfg.DatabaseURL = "sqlite:" + path
	cfg.StripeAPIKey = stripeKey
	cfg.Secret = strings.Repeat("r", 32)
	e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(db), nil, nil, nil) // the worker is not run
	require.NoError(t, err)
	return seedResetUser(t, &resetBundle{url: startHTTP(t, &app.API{Handler: e.Handler}), store: sqliteengine.New(db)})
}

func seedResetUser(t *testing.T, b *resetBundle) *resetBundle {
	t.Helper()
	_, err := b.store.Seed(t.Context(), &store.SeedFile{
		Rows: &tools.Seed{Users: []tools.SeedUser{{Tenant: "acme", UserID: "usr_1", Email: "ana@example.com"}}},
	})
	require.NoError(t, err)
	return b
}

// issue stores the reset token of downstream key key for acme's usr_1, as
// send_password_reset's Record does, expiring expiresIn from now; it
// returns the token.
func (b *resetBundle) issue(t *testing.T, operationID string, expiresIn time.Duration) string {
	t.Helper()
	ctx := t.Context()
	key := "idg_" + operationID + "_0"
	token := resetmail.Token([]byte(strings.Repeat("r", 32)), key)
	gtx, err := b.store.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = gtx.Rollback(ctx) }()
	tx, err := toolspec.WrapTx(gtx)
	require.NoError(t, err)
	var expires any = time.Now().Add(expiresIn)
	if tx.Engine() == gate.SQLite {
		expires = sqliteengine.FormatTime(time.Now().Add(expiresIn))
	}
	_, err = tx.Exec(ctx, `INSERT INTO password_reset_tokens (tenant_id, user_id, operation_id, token_hash, message_id, expires_at)
		VALUES ('acme', 'usr_1', $1, $2, $3, $4)`, operationID, resetmail.TokenHash(token), "<"+key+"@localhost>", expires)
	require.NoError(t, err)
	require.NoError(t, gtx.Commit(ctx))
	return token
}

// postRedeem redeems token at the api of url: the status and the body.
func postRedeem(t *testing.T, url, token string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+resetroute.RedeemPath, "application/json", strings.NewReader(`{"token":"`+token+`"}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func errorCode(body map[string]any) vocab.Code {
	e, _ := body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return vocab.Code(code)
}

// TestRedeemResetToken redeems on the assembled api, on both engines: once,
// then used; unknown; expired.
func TestRedeemResetToken(t *testing.T) {
	t.Parallel()
	for name, setup := range map[string]func(*testing.T) *resetBundle{"Postgres": setupResetsPostgres, "SQLite": setupResetsSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			const op1, op2 = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
			token := b.issue(t, op1, time.Hour)

			status, body := postRedeem(t, b.url, token)
			require.Equal(t, http.StatusOK, status, body)
			require.Equal(t, map[string]any{"tenant_id": "acme", "user_id": "usr_1", "operation_id": op1}, body)
			for range 2 {
				status, body = postRedeem(t, b.url, token)
				require.Equal(t, http.StatusGone, status, body)
				require.Equal(t, vocab.CodeResetTokenUsed, errorCode(body))
			}

			status, body = postRedeem(t, b.url, resetmail.Token([]byte("another secret, another token!!"), "idg_x_0"))
			require.Equal(t, http.StatusNotFound, status, body)
			require.Equal(t, vocab.CodeNotFound, errorCode(body))

			expired := b.issue(t, op2, -time.Hour)
			status, body = postRedeem(t, b.url, expired)
			require.Equal(t, http.StatusGone, status, body)
			require.Equal(t, vocab.CodeResetTokenExpired, errorCode(body))
		})
	}
}
