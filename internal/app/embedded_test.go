package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestEmbeddedSQLiteRefundWithDuplicateRetry runs the quickstart's shape:
// api and worker in one process on SQLite, through MCP.
func TestEmbeddedSQLiteRefundWithDuplicateRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_123", 5000, "usd")
	smtpAddr, mailAPI := mailpit.Start(t)
	path, db := sqlitetest.NewDB(t)
	seed := seedFile()
	seed.Rows.(*tools.Seed).Customers = []tools.SeedCustomer{{Tenant: "acme", CustomerID: "cus_1", Currency: "usd"}}
	seed.Rows.(*tools.Seed).Users = []tools.SeedUser{{Tenant: "acme", UserID: "usr_1", Email: "ana@example.com"}}
	_, err := sqliteengine.New(db).Seed(ctx, seed)
	require.NoError(t, err)

	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	cfg.DatabaseURL = "sqlite:" + path
	cfg.Wait = 10 * time.Second
	cfg.StripeAPIKey = "sk_test_idemgate"
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.SMTPAddr = smtpAddr
	cfg.Secret = strings.Repeat("e", 32)
	e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(db), nil, nil, &app.WorkerOptions{MaxWorkers: 4})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx, 10*time.Second) }()
	url := startHTTP(t, &app.API{Handler: e.Handler})
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	session := connect(t, url, tokenAcme)

	first, isErr := callTool(t, session, "refund_order", refund("sqlite-refund-0001", 1500))
	require.False(t, isErr, "%+v", first.Error)
	require.Equal(t, vocab.OutcomeAccepted, first.Outcome)
	require.Equal(t, vocab.StatusSucceeded, first.Operation.Status)
	again, isErr := callTool(t, session, "refund_order", refund("sqlite-refund-0001", 1500))
	require.False(t, isErr)
	require.Equal(t, vocab.OutcomeReplayed, again.Outcome)
	require.Equal(t, first.Operation.OperationID, again.Operation.OperationID)
	require.JSONEq(t, string(first.Operation.Result), string(again.Operation.Result))
	require.Equal(t, map[string]int{intentKey(t, cfg.Secret, "acme", "refund_order", refund("sqlite-refund-0001", 1500), 0): 1}, stripeSrv.RefundsByKey())

	conflict, isErr := callTool(t, session, "refund_order", refund("sqlite-refund-0001", 1600))
	require.True(t, isErr)
	require.Equal(t, vocab.CodeKeyReuseDifferentArgs, conflict.Error.Code)

	mail, isErr := callTool(t, session, "send_password_reset", map[string]any{"user_id": "usr_1", "idempotency_key": "sqlite-mail-0001"})
	require.False(t, isErr, "%+v", mail.Error)
	require.Equal(t, vocab.StatusSucceeded, mail.Operation.Status)
	var sent struct {
		MessageID string `json:"message_id"`
	}
	require.NoError(t, jsonUnmarshal(mail.Operation.Result, &sent))
	n, err := mailpit.New(mailAPI).CountByMessageID(ctx, sent.MessageID)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	var refunds int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM refunds`).Scan(&refunds))
	require.Equal(t, 1, refunds)
}
