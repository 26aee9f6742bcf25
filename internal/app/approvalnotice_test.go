package app_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/approvalmail"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

// noticeBundle is the api and its worker on one engine (Postgres: NewAPI
// and NewWorker; SQLite: NewEmbedded), with the test Stripe and Mailpit.
// acme and globex ask approval of refunds above 1000 cents; acme's
// approval_mail_to is two fresh addresses, globex has none.
type noticeBundle struct {
	url       string
	publicURL string
	mail      *mailpit.Client
	store     core.Store
	approvers []string
	// noticeJobs counts the approval notice jobs, of operationID when it
	// is set, in state when it is set.
	noticeJobs func(operationID, state string) int
	// metrics is the worker's /metrics.
	metrics func() string
}

// noticeFrom is the sender of the tests' mail: its domain is the
// Message-IDs' right part.
const noticeFrom = "Idemgate <approvals@idemgate.test>"

func setupNotices(t *testing.T, engineName string) *noticeBundle {
	t.Helper()
	return setupNoticesWith(t, engineName, nil, &app.WorkerOptions{MaxWorkers: 4})
}

// setupNoticesWith is setupNotices with tweak applied to the configuration
// (when set) and the workers' options.
func setupNoticesWith(t *testing.T, engineName string, tweak func(*config.Config), wopts *app.WorkerOptions) *noticeBundle {
	t.Helper()
	ctx := context.Background()
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_123", 5000, "usd")
	smtpAddr, mailAPI := mailpit.Start(t)
	// Mailpit may be shared with other tests: addresses of this test's own.
	tag := strings.ToLower(rand.Text()[:12])
	b := &noticeBundle{mail: mailpit.New(mailAPI), publicURL: "https://idemgate-" + tag + ".example",
		approvers: []string{"finance-" + tag + "@acme.example", "cfo-" + tag + "@acme.example"}}
	seed := seedFile()
	seed.Tenants = []store.SeedTenant{
		{Tenant: "acme", ApprovalThresholds: map[string]int64{"refund_order": 1000}, ApprovalMailTo: b.approvers},
		{Tenant: "globex", ApprovalThresholds: map[string]int64{"refund_order": 1000}},
	}

	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	cfg.Wait = 10 * time.Second
	cfg.StripeAPIKey = stripeKey
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.SMTPAddr = smtpAddr
	cfg.MailFrom = noticeFrom
	cfg.PublicURL = b.publicURL + "/" // a trailing slash is not doubled
	cfg.Secret = strings.Repeat("n", 32)
	if tweak != nil {
		tweak(cfg)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var stops []func() error
	// Registered after the database below: cleanups run last first, so the
	// api and worker stop before their database is closed.
	stopAll := func() {
		cancel()
		for _, stop := range stops {
			require.NoError(t, stop())
		}
	}
	run := func(f func() error) {
		done := make(chan error, 1)
		go func() { done <- f() }()
		stops = append(stops, func() error { return <-done })
	}

	switch engineName {
	case "postgres":
		dbURL, pool := pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: 20})
		_, err := pgengine.New(pool).Seed(ctx, seed)
		require.NoError(t, err)
		cfg.DatabaseURL = dbURL
		a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(pool, cfg.Pooled()), nil, nil)
		require.NoError(t, err)
		run(func() error { a.Run(runCtx); return nil })
		b.url = startHTTP(t, a)
		w, err := app.NewWorker(cfg, pgengine.NewDriver(pool, cfg.Pooled()), nil, wopts)
		require.NoError(t, err)
		run(func() error { return w.Run(runCtx, 10*time.Second) })
		workerSrv := httptest.NewServer(w.Handler)
		t.Cleanup(workerSrv.Close)
		b.store = pgengine.New(pool)
		b.metrics = func() string { return get(t, workerSrv.URL+"/metrics") }
		b.noticeJobs = func(operationID, state string) int {
			return countRows(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1
				AND ($2 = '' OR args->>'operation_id' = $2) AND ($3 = '' OR state::text = $3)`,
				jobs.ApprovalNoticeKind, operationID, state)
		}
	case "sqlite":
		path, db := sqlitetest.NewDB(t)
		_, err := sqliteengine.New(db).Seed(ctx, seed)
		require.NoError(t, err)
		cfg.DatabaseURL = "sqlite:" + path
		e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(db), nil, nil, wopts)
		require.NoError(t, err)
		run(func() error { return e.Run(runCtx, 10*time.Second) })
		b.url = startHTTP(t, &app.API{Handler: e.Handler})
		b.store = sqliteengine.New(db)
		b.metrics = func() string { return get(t, b.url+"/metrics") }
		b.noticeJobs = func(operationID, state string) int {
			return countSQLite(t, db, `SELECT count(*) FROM river_job WHERE kind = ?1
				AND (?2 = '' OR json_extract(args, '$.operation_id') = ?2) AND (?3 = '' OR state = ?3)`,
				jobs.ApprovalNoticeKind, operationID, state)
		}
	default:
		t.Fatalf("no engine %q", engineName)
	}
	t.Cleanup(stopAll)
	return b
}

func countSQLite(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), query, args...).Scan(&n))
	return n
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}

// noticeID is the Message-ID of the approval notice of operationID.
func noticeID(operationID string) string {
	return resetmail.MessageID(approvalmail.Key(operationID), "idemgate.test")
}

// awaitNotice waits until the notice job of operationID has completed.
func (b *noticeBundle) awaitNotice(t *testing.T, operationID string) {
	t.Helper()
	require.Eventually(t, func() bool { return b.noticeJobs(operationID, "completed") == 1 }, 30*time.Second, 50*time.Millisecond,
		"the notice job of %s completes", operationID)
}

// TestApprovalNoticeMailedOnce: a refund above acme's threshold waits for
// approval and mails acme's approvers exactly one notice (one job, inserted
// with the claim) linking to the approval page under IDEMGATE_PUBLIC_URL;
// retries of it add no job and no mail; a refund under the threshold mails
// nobody; globex, which has no approval_mail_to, gets no mail and its job
// completes. On both engines.
func TestApprovalNoticeMailedOnce(t *testing.T) {
	t.Parallel()
	for _, engineName := range []string{"postgres", "sqlite"} {
		t.Run(engineName, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setupNotices(t, engineName)
			acme := connect(t, b.url, tokenAcme)

			first, isErr := callTool(t, acme, "refund_order", refund("notice-key-0001", 1500))
			require.False(t, isErr, "%+v", first.Error)
			require.Equal(t, vocab.StatusAwaitingApproval, first.Operation.Status)
			op := first.Operation.OperationID
			require.Equal(t, 1, b.noticeJobs("", ""), "one notice job, inserted with the claim")
			b.awaitNotice(t, op)

			var ms []mailpit.Message
			require.Eventually(t, func() bool {
				var err error
				ms, err = b.mail.ByMessageID(ctx, noticeID(op))
				return err == nil && len(ms) > 0
			}, 30*time.Second, 50*time.Millisecond)
			require.Len(t, ms, 1, "one message for all the approvers")
			require.Equal(t, "Approval needed: refund_order for acme", ms[0].Subject)
			var to []string
			for _, a := range ms[0].To {
				to = append(to, a.Address)
			}
			require.Equal(t, b.approvers, to)
			claim, err := b.store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: "acme", OperationID: op})
			require.NoError(t, err)
			body, err := b.mail.Body(ctx, ms[0].ID)
			require.NoError(t, err)
			for _, want := range []string{
				b.publicURL + "/approvals/" + op, string(claim.Args), "Fingerprint:   " + claim.ArgsHash,
				"Requested by:  support-bot", "Decide before: " + claim.ApprovalExpiresAt.UTC().Format(time.RFC3339),
			} {
				require.Contains(t, body, want)
			}
			require.NotContains(t, body, b.publicURL+"//approvals/")

			// Retries answer the waiting operation: no job, no mail.
			for range 3 {
				again, isErr := callTool(t, acme, "refund_order", refund("notice-key-0001", 1500))
				require.False(t, isErr, "%+v", again.Error)
				require.Equal(t, vocab.OutcomeInFlight, again.Outcome)
				require.Equal(t, op, again.Operation.OperationID)
			}
			require.Equal(t, 1, b.noticeJobs("", ""))

			// Under the threshold: it runs at once, and nobody is mailed.
			small, isErr := callTool(t, acme, "refund_order", refund("notice-key-0002", 500))
			require.False(t, isErr, "%+v", small.Error)
			require.Equal(t, vocab.StatusSucceeded, small.Operation.Status)
			require.Equal(t, 1, b.noticeJobs("", ""))

			// globex has no approvers: its notice job completes, mailing nobody.
			g, isErr := callTool(t, connect(t, b.url, tokenGlobex), "refund_order", refund("notice-key-0003", 1500))
			require.False(t, isErr, "%+v", g.Error)
			require.Equal(t, vocab.StatusAwaitingApproval, g.Operation.Status)
			b.awaitNotice(t, g.Operation.OperationID)

			n, err := b.mail.CountByMessageID(ctx, noticeID(op))
			require.NoError(t, err)
			require.Equal(t, 1, n, "still one mail")
			n, err = b.mail.CountByMessageID(ctx, noticeID(g.Operation.OperationID))
			require.NoError(t, err)
			require.Zero(t, n)
			for _, o := range []string{small.Operation.OperationID, g.Operation.OperationID} {
				n, err := b.mail.CountByMessageID(ctx, noticeID(o))
				require.NoError(t, err)
				require.Zero(t, n, "no notice of %s", o)
			}
			metrics := b.metrics()
			require.Contains(t, metrics, `idemgate_approval_notices_total{outcome="sent"} 1`)
			require.Contains(t, metrics, `idemgate_approval_notices_total{outcome="no_recipients"} 1`)
			require.Contains(t, metrics, `idemgate_approval_notices_total{outcome="rejected"} 0`)
		})
	}
}
