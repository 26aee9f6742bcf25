package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/oauth/oauthtest"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

// lastAudit is the last audit row of acme's refund with key.
func lastAudit(t *testing.T, s core.Store, key string) *core.AuditEvent {
	t.Helper()
	events, err := s.AuditListByKey(context.Background(), &core.AuditListByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: key})
	require.NoError(t, err)
	return events[len(events)-1]
}

// claimStatus is the status of acme's refund with key.
func claimStatus(t *testing.T, s core.Store, key string) vocab.Status {
	t.Helper()
	c, err := s.ClaimGetByKey(context.Background(), &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: key})
	require.NoError(t, err)
	return c.Status
}

// retryBody is River UI's Retry of job id.
func retryBody(id int64) string { return fmt.Sprintf(`{"ids":["%d"]}`, id) }

// TestOpsOAuthOperatorIsListedNotClaimed replays the red-team finding in
// OAuth mode: an access token whose tenant claim is the operator tenant,
// with scope ops:admin, is no operator unless IDEMGATE_OPS_SUBJECTS lists
// its subject. Mallory's token (tenant claim "ops", even with Ana's email
// as its user claim) gets 403 on River UI, its Retry and /ops/redrive, and
// acme's failed refund stays failed with no row written; Ana's listed
// subject re-drives it through River UI and /ops/redrive, each audit row
// naming her and the channel. A tenant's own ops:admin token still
// re-drives its own tenant's operations, and only those.
func TestOpsOAuthOperatorIsListedNotClaimed(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		idp := oauthtest.Start(t, nil)
		d := enginetest.New(t, engine, nil)
		_, err := d.Store.Seed(context.Background(), seedFile())
		require.NoError(t, err)
		cfg := opsConfig(d, opsEnv)
		cfg.OAuthIssuer, cfg.OAuthAudience = idp.Issuer(), oauthtest.DefaultAudience
		cfg.OAuthUserClaim = "email"
		cfg.OpsSubjects = "sub-ana"
		require.Len(t, cfg.OperatorSubjects(), 1)
		logger, logs := logtest.New()
		url, g := serveOpsAPI(t, cfg, d, logger)
		s := g.Store()

		token := func(sub, tenant, email string, scopes ...string) string {
			return idp.Token(t, &oauthtest.TokenParams{Subject: sub, Tenant: tenant, Scopes: scopes, Claims: map[string]any{"email": email}})
		}
		agent := token("bot-7", "acme", "bot@acme.example", "billing:refund", "operations:read")
		mallory := token("sub-mallory", config.DefaultOperatorTenant, "ana@example.com", tenancy.ScopeOpsAdmin)
		ana := token("sub-ana", config.DefaultOperatorTenant, "ana@example.com", tenancy.ScopeOpsAdmin)
		acmeLead := token("sub-lead", "acme", "lead@acme.example", tenancy.ScopeOpsAdmin)

		session := connect(t, url, agent)
		for _, key := range []string{"oauth-ops-riverui", "oauth-ops-route-1", "oauth-ops-tenant1"} {
			_, isErr := callTool(t, session, "refund_order", refund(key, 100))
			require.False(t, isErr)
		}
		viaUI := failClaim(t, s, "oauth-ops-riverui", vocab.CodeCardDeclined)
		failClaim(t, s, "oauth-ops-route-1", vocab.CodeOutcomeUnknown)
		failClaim(t, s, "oauth-ops-tenant1", vocab.CodeOutcomeUnknown)

		// Mallory: refused everywhere under /ops, and nothing changes.
		before := snapshot(t, d)
		for _, tt := range []struct{ method, path, body string }{
			{http.MethodGet, ops.RiverUIPath + "/", ""},
			{http.MethodGet, ops.RiverUIPath + "/api/jobs?state=available", ""},
			{http.MethodPost, ops.RiverUIPath + "/api/jobs/retry", retryBody(viaUI.JobID)},
			{http.MethodPost, ops.RedrivePath, `{"tenant":"acme","tool":"refund_order","idempotency_key":"oauth-ops-riverui","reason":"r"}`},
			{http.MethodPost, ops.RedrivePath, `{"tool":"refund_order","idempotency_key":"oauth-ops-riverui","reason":"r"}`},
		} {
			resp, body := opsDo(t, tt.method, url+tt.path, bearerAuth(mallory), tt.body, nil)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s: %s", tt.method, tt.path, body)
			require.Contains(t, body, `"code":"forbidden"`)
			require.Contains(t, body, "IDEMGATE_OPS_SUBJECTS", "the refusal says why")
		}
		require.Equal(t, before, snapshot(t, d), "mallory changed nothing")
		require.Equal(t, vocab.StatusFailed, claimStatus(t, s, "oauth-ops-riverui"))
		require.Contains(t, logs.String(), `"subject":"sub-mallory"`)
		require.Contains(t, logs.String(), "not an operator")

		// A tenant's own ops:admin token: no River UI, its own tenant only.
		resp, body := opsDo(t, http.MethodGet, url+ops.RiverUIPath+"/", bearerAuth(acmeLead), "", nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
		resp, body = opsDo(t, http.MethodPost, url+ops.RedrivePath, bearerAuth(acmeLead),
			`{"tenant":"globex","tool":"refund_order","idempotency_key":"oauth-ops-tenant1","reason":"r"}`, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
		resp, body = opsDo(t, http.MethodPost, url+ops.RedrivePath, bearerAuth(acmeLead),
			`{"tool":"refund_order","idempotency_key":"oauth-ops-tenant1","reason":"provider back"}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		ev := lastAudit(t, s, "oauth-ops-tenant1")
		require.Equal(t, vocab.DecisionRedriven, ev.Decision)
		require.Equal(t, "lead@acme.example", ev.UserID)
		require.Equal(t, "redriven by lead@acme.example via /ops/redrive (oauth): provider back", ev.Reason)

		// Ana, listed: River UI, and its Retry re-drives through the gate in
		// her name.
		resp, body = opsDo(t, http.MethodGet, url+ops.RiverUIPath+"/", bearerAuth(ana), "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		resp, body = opsDo(t, http.MethodPost, url+ops.RiverUIPath+"/api/jobs/retry", bearerAuth(ana), retryBody(viaUI.JobID), nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, vocab.StatusQueued, claimStatus(t, s, "oauth-ops-riverui"))
		ev = lastAudit(t, s, "oauth-ops-riverui")
		require.Equal(t, vocab.DecisionRedriven, ev.Decision)
		require.Equal(t, "ana@example.com", ev.UserID)
		require.Contains(t, ev.Reason, "redriven by ana@example.com via riverui (oauth): "+ops.RiverUIRetryReason)

		resp, body = opsDo(t, http.MethodPost, url+ops.RedrivePath, bearerAuth(ana),
			`{"tenant":"acme","tool":"refund_order","idempotency_key":"oauth-ops-route-1","reason":"stripe outage over"}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		ev = lastAudit(t, s, "oauth-ops-route-1")
		require.Equal(t, "ana@example.com", ev.UserID)
		require.Equal(t, "redriven by ana@example.com via /ops/redrive (oauth): stripe outage over", ev.Reason)
	})
}

// TestOpsRiverUIRetryNamesTheOperator: River UI's Retry of a failed
// operation's job re-drives it through the gate in the name of whoever
// pressed it (the Basic user, an operator token's user), naming the
// channel; a cancelled operation's Retry is refused (409), audited in the
// person's name, and its job left alone; a job River UI retries by itself
// (a succeeded operation's) is passed on.
func TestOpsRiverUIRetryNamesTheOperator(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupOpsAPI(t, engine, opsEnv)
		s := b.gate.Store()
		session := connect(t, b.url, tokenAcme)
		keys := []string{"ui-basic-000001", "ui-token-000001", "ui-cancelled-01", "ui-succeeded-01"}
		for _, key := range keys {
			_, isErr := callTool(t, session, "refund_order", refund(key, 100))
			require.False(t, isErr)
		}
		basicJob := failClaim(t, s, keys[0], vocab.CodeCardDeclined).JobID
		tokenJob := failClaim(t, s, keys[1], vocab.CodeOutcomeUnknown).JobID
		cancelledJob := failClaim(t, s, keys[2], vocab.CodeCancelled).JobID
		completeIn(t, s, &vocab.Operation{Tool: "refund_order", IdempotencyKey: keys[3]})
		retry := b.url + ops.RiverUIPath + "/api/jobs/retry"

		resp, body := opsDo(t, http.MethodPost, retry, basicAuth(opsUser, opsPassword), retryBody(basicJob), nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		ev := lastAudit(t, s, keys[0])
		require.Equal(t, vocab.DecisionRedriven, ev.Decision)
		require.Equal(t, opsUser, ev.UserID)
		require.Contains(t, ev.Reason, "redriven by "+opsUser+" via riverui (basic): "+ops.RiverUIRetryReason)
		require.Equal(t, vocab.StatusQueued, claimStatus(t, s, keys[0]))

		resp, body = opsDo(t, http.MethodPost, retry, bearerAuth(tokenOperator), fmt.Sprintf(`{"ids":[%d]}`, tokenJob), nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		ev = lastAudit(t, s, keys[1])
		require.Equal(t, "sre", ev.UserID)
		require.Equal(t, "redriven by sre via riverui (bearer): "+ops.RiverUIRetryReason, ev.Reason)

		before := snapshot(t, b.db)
		resp, body = opsDo(t, http.MethodPost, retry, basicAuth(opsUser, opsPassword), retryBody(cancelledJob), nil)
		require.Equal(t, http.StatusConflict, resp.StatusCode, body)
		require.Contains(t, body, "cancelled")
		require.Equal(t, plusAudit(before, 1), snapshot(t, b.db), "nothing changes but the refusal's audit row")
		ev = lastAudit(t, s, keys[2])
		require.Equal(t, vocab.DecisionDenied, ev.Decision)
		require.Equal(t, opsUser, ev.UserID)
		require.Contains(t, ev.Reason, "asked by "+opsUser+" via riverui (basic)")
		require.Equal(t, vocab.StatusFailed, claimStatus(t, s, keys[2]))

		// Not a failed operation's job: River UI's own Retry, no re-drive.
		succeeded, err := s.ClaimGetByKey(context.Background(), &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: keys[3]})
		require.NoError(t, err)
		audits := b.db.Count(t, `SELECT count(*) FROM audit_events`)
		resp, body = opsDo(t, http.MethodPost, retry, basicAuth(opsUser, opsPassword), retryBody(succeeded.JobID), nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, audits, b.db.Count(t, `SELECT count(*) FROM audit_events`))
		require.Equal(t, vocab.StatusSucceeded, claimStatus(t, s, keys[3]))

		// An unknown job: River UI answers as it does.
		resp, body = opsDo(t, http.MethodPost, retry, basicAuth(opsUser, opsPassword), retryBody(987654321), nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	})
}
