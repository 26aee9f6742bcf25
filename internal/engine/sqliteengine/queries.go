package sqliteengine

import (
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/core"
)

// All of the SQLite engine's SQL: the gate's statements (claims,
// tombstones, audit, River job reads), then tokens, orders and seeding,
// then the domain rows. Parameters are numbered (?1, ?2, …) so that one may
// appear twice. Timestamps are TEXT in TimeFormat, compared as text, which
// TimeFormat's fixed width makes chronological; scopes are a JSON array;
// hashes are BLOBs. Clock parameters are nullable TimeFormat overrides of
// the database clock, for tests only; production passes NULL and every
// comparison uses strftime's 'now'.

// sqlNow is the database's clock in TimeFormat.
const sqlNow = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`

// at returns the clock expression for parameter p: the override if given,
// else the database's clock.
func at(p string) string { return "coalesce(" + p + ", " + sqlNow + ")" }

// plus returns the expression for time t plus modifier m (such as
// '+60.000 seconds'), in TimeFormat.
func plus(t, m string) string { return "strftime('%Y-%m-%dT%H:%M:%fZ', " + t + ", " + m + ")" }

// claimColumns are selected by every claim query, in scanClaim's order. The
// last two, expired and lease_live, follow: computed, or false.
const claimColumns = `id, operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash,
	status, epoch, lease_expires_at, attempts, coalesce(job_id, 0), generation, downstream_key, ttl_seconds,
	result, error, last_error, first_called_at, created_at, updated_at, expires_at, approval_expires_at,
	approval_summary`

// computed returns the expired and lease_live columns against the clock
// parameter p, which may be NULL.
func computed(p string) string {
	return fmt.Sprintf(`,
	(expires_at IS NOT NULL AND expires_at <= %[1]s) AS expired,
	(status = 'running' AND lease_expires_at > %[1]s) AS lease_live`, at(p))
}

// notComputed stands for expired and lease_live where they are known false.
const notComputed = `, 0, 0`

// sqlClaimInsert inserts unless the key is taken, or a live tombstone says
// this very intent (same fingerprint) already ran. ?12 is the approval
// window as a strftime modifier, ” for a claim that does not wait.
var sqlClaimInsert = `
INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash, status,
	ttl_seconds, retention_seconds, job_id, intent_key, approval_expires_at, approval_summary, incarnation)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, CASE WHEN ?12 <> '' THEN 'awaiting_approval' ELSE 'queued' END, ?8, ?9,
	nullif(?10, 0), nullif(?11, ''), CASE WHEN ?12 <> '' THEN ` + plus(sqlNow, "?12") + ` END, nullif(?13, ''),
	coalesce((SELECT t.incarnation + 1 FROM idempotency_tombstones t
		WHERE t.tenant_id = ?2 AND t.tool = ?3 AND t.idempotency_key = ?4 AND t.args_hash = ?7), 0)
WHERE NOT EXISTS (
	SELECT 1 FROM idempotency_tombstones t
	WHERE t.tenant_id = ?2 AND t.tool = ?3 AND t.idempotency_key = ?4 AND t.args_hash = ?7 AND t.retain_until > ` + sqlNow + ` AND t.forgotten_at IS NULL
)
ON CONFLICT (tenant_id, tool, idempotency_key) DO NOTHING
RETURNING ` + claimColumns + notComputed

// sqlGuardUpsert is the duplicate guard of a claim insert
// (core.ClaimInsertParams.DuplicateWindow), run before it in the same
// transaction: the guard row of (tenant, tool, fingerprint) names the new
// claim until now plus ?6 (a modifier), unless it names another key's
// operation that is within its window or still waits or runs, and is not
// the confirmed one (?7). It returns a row only when it let the claim in.
var sqlGuardUpsert = `
INSERT INTO fingerprint_guards AS f (tenant_id, tool, args_hash, operation_id, idempotency_key, guarded_until)
VALUES (?2, ?3, ?5, ?1, ?4, ` + plus(sqlNow, "?6") + `)
ON CONFLICT (tenant_id, tool, args_hash) DO UPDATE SET
	operation_id = excluded.operation_id, idempotency_key = excluded.idempotency_key, guarded_until = excluded.guarded_until
WHERE f.idempotency_key = excluded.idempotency_key
	OR f.operation_id = ?7
	OR (f.guarded_until <= ` + sqlNow + ` AND NOT EXISTS (
		SELECT 1 FROM idempotency_claims c
		WHERE c.operation_id = f.operation_id AND c.status IN ('awaiting_approval', 'queued', 'running')))
RETURNING 1`

const sqlGuardGet = `
SELECT operation_id, idempotency_key, guarded_until
FROM fingerprint_guards
WHERE tenant_id = ?1 AND tool = ?2 AND args_hash = ?3`

var sqlClaimGetByKey = `
SELECT ` + claimColumns + computed("?4") + `
FROM idempotency_claims
WHERE tenant_id = ?1 AND tool = ?2 AND idempotency_key = ?3`

var sqlClaimGetByID = `
SELECT ` + claimColumns + computed("?2") + `
FROM idempotency_claims
WHERE id = ?1`

// The take-over keeps epoch (fencing stays monotonic across intents) and
// resets everything else that belonged to the old intent.
var sqlClaimTakeOver = `
UPDATE idempotency_claims SET
	operation_id = ?2, user_id = ?3, args = ?4, args_hash = ?5, ttl_seconds = ?6, retention_seconds = ?8,
	intent_key = nullif(?10, ''), status = CASE WHEN ?11 <> '' THEN 'awaiting_approval' ELSE 'queued' END,
	incarnation = coalesce((SELECT t.incarnation + 1 FROM idempotency_tombstones t
		WHERE t.tenant_id = idempotency_claims.tenant_id AND t.tool = idempotency_claims.tool
			AND t.idempotency_key = idempotency_claims.idempotency_key AND t.args_hash = ?5), 0),
	approval_expires_at = CASE WHEN ?11 <> '' THEN ` + plus(at("?7"), "?11") + ` END, approval_summary = nullif(?12, ''),
	lease_expires_at = NULL, attempts = 0, job_id = nullif(?9, 0), generation = 0,
	result = NULL, error = NULL, last_error = NULL, first_called_at = NULL,
	created_at = ` + sqlNow + `, updated_at = ` + sqlNow + `, expires_at = NULL
WHERE id = ?1 AND status IN ('succeeded', 'failed') AND expires_at <= ` + at("?7") + `
RETURNING ` + claimColumns + notComputed

// ?3 is the lease as a strftime modifier ('+120.000 seconds').
var sqlClaimLease = `
UPDATE idempotency_claims SET
	status = 'running', epoch = epoch + 1, attempts = attempts + 1,
	lease_expires_at = ` + plus(at("?4"), "?3") + `,
	first_called_at = coalesce(first_called_at, ` + at("?4") + `),
	updated_at = ` + sqlNow + `
WHERE operation_id = ?1 AND job_id = ?2
	AND (status = 'queued' OR (status = 'running' AND lease_expires_at <= ` + at("?4") + `))
RETURNING ` + claimColumns + computed("?4")

// sqlClaimLock is the lease's condition without the write: the IMMEDIATE
// transaction it runs in holds the write lock already.
var sqlClaimLock = `
SELECT ` + claimColumns + computed("?3") + `
FROM idempotency_claims
WHERE operation_id = ?1 AND job_id = ?2
	AND (status = 'queued' OR (status = 'running' AND lease_expires_at <= ` + at("?3") + `))`

// sqlClaimCompleteLocked completes a claim sqlClaimLock found: the lease
// and the completion in one write.
var sqlClaimCompleteLocked = `
UPDATE idempotency_claims SET
	status = 'succeeded', epoch = epoch + 1, attempts = attempts + 1,
	first_called_at = coalesce(first_called_at, ` + at("?4") + `),
	result = ?3, error = NULL, lease_expires_at = NULL, updated_at = ` + sqlNow + `,
	expires_at = ` + plus(at("?4"), "'+' || ttl_seconds || ' seconds'") + `
WHERE id = ?1 AND epoch = ?2
	AND (status = 'queued' OR (status = 'running' AND lease_expires_at <= ` + at("?4") + `))
RETURNING ` + claimColumns + computed("?4")

var sqlClaimComplete = `
UPDATE idempotency_claims SET
	status = 'succeeded', result = ?3, error = NULL, lease_expires_at = NULL, updated_at = ` + sqlNow + `,
	expires_at = ` + plus(at("?4"), "'+' || ttl_seconds || ' seconds'") + `
WHERE id = ?1 AND status = 'running' AND epoch = ?2
RETURNING ` + claimColumns + computed("?4")

var sqlClaimFail = `
UPDATE idempotency_claims SET
	status = 'failed', error = ?3, lease_expires_at = NULL, updated_at = ` + sqlNow + `,
	expires_at = ` + plus(at("?5"), "'+' || ttl_seconds || ' seconds'") + `
WHERE id = ?1 AND status = 'running' AND epoch = ?2
	AND (NOT ?4 OR lease_expires_at <= ` + at("?5") + `)
RETURNING ` + claimColumns + computed("?5")

const sqlClaimRelease = `
UPDATE idempotency_claims SET
	status = 'queued', lease_expires_at = NULL, last_error = ?3, updated_at = ` + sqlNow + `
WHERE id = ?1 AND status = 'running' AND epoch = ?2
RETURNING ` + claimColumns + notComputed

var sqlClaimReclaim = `
UPDATE idempotency_claims SET
	status = 'queued', lease_expires_at = NULL, job_id = ?3, updated_at = ` + sqlNow + `
WHERE id = ?1 AND status = 'running' AND epoch = ?2 AND lease_expires_at <= ` + at("?4") + `
RETURNING ` + claimColumns + computed("?4")

// sqlClaimSettle stores a provider's outcome of a claim whose outcome was
// unknown (core.EventSettle, core.EventSettleFailed): ?4 NULL succeeds it.
var sqlClaimSettle = `
UPDATE idempotency_claims SET
	status = CASE WHEN ?4 IS NULL THEN 'succeeded' ELSE 'failed' END,
	result = ?3, error = ?4, epoch = epoch + 1, lease_expires_at = NULL, updated_at = ` + sqlNow + `,
	expires_at = ` + plus(at("?5"), "'+' || ttl_seconds || ' seconds'") + `
WHERE id = ?1 AND epoch = ?2
	AND ((status = 'failed' AND json_extract(error, '$.code') = 'outcome_unknown')
		OR (status = 'running' AND lease_expires_at <= ` + at("?5") + `))
RETURNING ` + claimColumns + computed("?5")

const sqlClaimRedrive = `
UPDATE idempotency_claims SET
	status = 'queued',
	generation = generation + CASE WHEN ?2 THEN 1 ELSE 0 END,
	first_called_at = CASE WHEN ?2 THEN NULL ELSE first_called_at END,
	job_id = coalesce(nullif(?3, 0), job_id),
	attempts = 0, result = NULL, error = NULL, lease_expires_at = NULL, expires_at = NULL,
	updated_at = ` + sqlNow + `
WHERE id = ?1 AND status = 'failed'
	AND coalesce(json_extract(error, '$.code'), '') NOT IN ('cancelled', 'approval_denied', 'approval_expired')
RETURNING ` + claimColumns + notComputed

// A claim awaiting approval has no job: JobID zero holds it.
var sqlClaimAbandon = `
UPDATE idempotency_claims SET
	status = 'failed', error = ?4, lease_expires_at = NULL, approval_expires_at = NULL, updated_at = ` + sqlNow + `,
	expires_at = ` + plus(at("?5"), "'+' || ttl_seconds || ' seconds'") + `
WHERE id = ?1 AND epoch = ?2 AND coalesce(job_id, 0) = ?3
	AND (status IN ('queued', 'awaiting_approval') OR (status = 'running' AND lease_expires_at <= ` + at("?5") + `))
RETURNING ` + claimColumns + computed("?5")

// sqlClaimApprove queues a claim awaiting approval, of the approved
// fingerprint and within its window, pointing at the job inserted in the
// same transaction.
var sqlClaimApprove = `
UPDATE idempotency_claims SET
	status = 'queued', job_id = ?3, approval_expires_at = NULL, updated_at = ` + sqlNow + `
WHERE id = ?1 AND status = 'awaiting_approval' AND args_hash = ?2 AND approval_expires_at > ` + at("?4") + `
RETURNING ` + claimColumns + computed("?4")

// sqlClaimDecline fails a claim awaiting approval: a denial (?3 false)
// within its window, an expiry (?3 true) after it.
var sqlClaimDecline = `
UPDATE idempotency_claims SET
	status = 'failed', error = ?2, approval_expires_at = NULL, updated_at = ` + sqlNow + `,
	expires_at = ` + plus(at("?4"), "'+' || ttl_seconds || ' seconds'") + `
WHERE id = ?1 AND status = 'awaiting_approval' AND (approval_expires_at <= ` + at("?4") + `) = ?3
RETURNING ` + claimColumns + computed("?4")

var sqlClaimListApprovalExpired = `
SELECT ` + claimColumns + computed("?2") + `
FROM idempotency_claims
WHERE status = 'awaiting_approval' AND approval_expires_at <= ` + at("?2") + `
ORDER BY approval_expires_at
LIMIT ?1`

// sqlApprovalPendingCount counts a tenant's claims awaiting approval whose
// window is open (core.Executor.ApprovalPendingCount): a transaction holds
// the write lock from BEGIN IMMEDIATE, which serializes the counts.
var sqlApprovalPendingCount = `
SELECT count(*) FROM idempotency_claims
WHERE status = 'awaiting_approval' AND tenant_id = ?1 AND approval_expires_at > ` + at("?2")

// A claim is orphaned when it waits on a job that will never run it again.
var sqlClaimListOrphaned = `
SELECT ` + claimColumns + computed("?2") + `
FROM idempotency_claims c
WHERE c.status IN ('queued', 'running')
	AND NOT (c.status = 'running' AND c.lease_expires_at > ` + at("?2") + `)
	AND c.job_id IS NOT NULL
	AND NOT EXISTS (
		SELECT 1 FROM river_job j
		WHERE j.id = c.job_id AND j.state NOT IN ('completed', 'cancelled', 'discarded')
	)
ORDER BY c.id
LIMIT ?1`

// River's SQLite driver writes attempted_at as datetime('now', 'subsec')
// ("YYYY-MM-DD HH:MM:SS.SSS"): compare as Julian days, which read both forms.
var sqlClaimListStalled = `
SELECT ` + claimColumns + computed("?2") + `
FROM idempotency_claims c
WHERE c.status = 'queued'
	AND EXISTS (
		SELECT 1 FROM river_job j
		WHERE j.id = c.job_id AND j.state = 'running'
			AND julianday(j.attempted_at) <= julianday(` + at("?2") + `) - ?3 / 86400.0
	)
ORDER BY c.id
LIMIT ?1`

var sqlClaimRepoint = `
UPDATE idempotency_claims SET job_id = ?4, updated_at = ` + sqlNow + `
WHERE id = ?1 AND status = 'queued' AND epoch = ?2 AND job_id = ?3
RETURNING ` + claimColumns + notComputed

// ?4 is the Since bound in TimeFormat, or NULL.
var sqlClaimList = `
SELECT ` + claimColumns + computed("NULL") + `
FROM idempotency_claims
WHERE (?1 = '' OR tenant_id = ?1)
	AND (?2 = '' OR tool = ?2)
	AND (?3 = '' OR status = ?3)
	AND (?4 IS NULL OR updated_at >= ?4)
	AND (?6 = '' OR CAST(json_extract(args, '$.' || ?6) AS TEXT) = ?7)
ORDER BY updated_at DESC, id DESC
LIMIT ?5`

var sqlClaimGetByOperation = `
SELECT ` + claimColumns + computed("?3") + `
FROM idempotency_claims
WHERE operation_id = ?2 AND tenant_id = ?1`

// sqlClaimListNewest pages one tenant's claims by creation, newest first,
// on idempotency_claims_tenant_created_idx. ?4 is the cursor's created_at
// in TimeFormat, or NULL.
var sqlClaimListNewest = `
SELECT ` + claimColumns + computed("NULL") + `
FROM idempotency_claims
WHERE tenant_id = ?1
	AND (?2 = '' OR tool = ?2)
	AND (?3 = '' OR status = ?3)
	AND (?4 IS NULL OR created_at < ?4 OR (created_at = ?4 AND id < ?5))
	AND (?7 = '' OR CAST(json_extract(args, '$.' || ?7) AS TEXT) = ?8)
ORDER BY created_at DESC, id DESC
LIMIT ?6`

// sqlJobGet reads a River job; next_run_at only for a job River will run
// again by itself. River's SQLite driver writes times in more than one
// text form: julianday reads them all.
var sqlJobGet = `
SELECT id, state,
	CASE WHEN state IN ('available', 'scheduled', 'retryable')
		THEN strftime('%Y-%m-%dT%H:%M:%fZ', max(julianday(scheduled_at), julianday('now'))) END,
	json_extract(metadata, '$.cancel_attempted_at') IS NOT NULL
FROM river_job
WHERE id = ?1`

const sqlClaimListTerminal = `
SELECT id FROM idempotency_claims
WHERE id IN (SELECT value FROM json_each(?1)) AND status IN ('succeeded', 'failed')`

var sqlClaimListLeaseExpired = `
SELECT ` + claimColumns + computed("?2") + `
FROM idempotency_claims
WHERE status = 'running' AND lease_expires_at <= ` + at("?2") + `
ORDER BY lease_expires_at
LIMIT ?1`

// SQLite has one writer at a time, so the pruner needs no SKIP LOCKED: the
// batch is chosen and deleted under the write lock.
// expiredBatch selects the batch ClaimArchiveExpired moves, in a stable
// order so that its two statements see the same rows.
var expiredBatch = `
	SELECT id FROM idempotency_claims
	WHERE expires_at <= ` + at("?2") + ` AND status IN ('succeeded', 'failed')
	ORDER BY expires_at, id
	LIMIT ?1`

// sqlClaimArchiveDelete deletes a batch of expired terminal claims under
// one clock reading and returns what their keys' history keeps of each:
// the claims deleted are exactly the rows the archive then writes (the
// executor does, in the same transaction).
var sqlClaimArchiveDelete = `
DELETE FROM idempotency_claims WHERE id IN (` + expiredBatch + `)
RETURNING ` + historyColumns

// historyColumns are what a key's history keeps of a claim, in
// historyRow's order.
const historyColumns = `tenant_id, tool, idempotency_key, args_hash, operation_id, coalesce(job_id, 0), status,
	coalesce(json_extract(error, '$.code'), ''), expires_at,
	strftime('%Y-%m-%dT%H:%M:%fZ', expires_at, '+' || retention_seconds || ' seconds'), incarnation`

// sqlClaimTakeOverHistory reads what the key's history keeps of a claim a
// take-over is about to replace, under the take-over's own condition.
var sqlClaimTakeOverHistory = `
SELECT ` + historyColumns + `
FROM idempotency_claims
WHERE id = ?1 AND status IN ('succeeded', 'failed') AND expires_at <= ` + at("?2")

// sqlHistoryUpsert keeps a fingerprint in its key's history; a live row of
// the same fingerprint (it cannot run twice) keeps its first operation, an
// expired one is replaced.
var sqlHistoryUpsert = `
INSERT INTO idempotency_tombstones (tenant_id, tool, idempotency_key, args_hash, operation_id, status, error_code,
	expired_at, retain_until, incarnation)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, nullif(?7, ''), ?8, ?9, ?11)
ON CONFLICT (tenant_id, tool, idempotency_key, args_hash) DO UPDATE SET
	operation_id = excluded.operation_id, status = excluded.status, error_code = excluded.error_code,
	expired_at = excluded.expired_at, retain_until = excluded.retain_until,
	incarnation = excluded.incarnation, forgotten_at = NULL
WHERE (idempotency_tombstones.retain_until <= ` + at("?10") + ` OR idempotency_tombstones.forgotten_at IS NOT NULL)`

// sqlTombstoneGetByKey reads the live history row of one fingerprint.
var sqlTombstoneGetByKey = `
SELECT tenant_id, tool, idempotency_key, args_hash, operation_id, status, coalesce(error_code, ''), expired_at, retain_until
FROM idempotency_tombstones
WHERE tenant_id = ?1 AND tool = ?2 AND idempotency_key = ?3 AND args_hash = ?4 AND forgotten_at IS NULL AND retain_until > ` + at("?5")

// sqlTombstoneDeleteExpired forgets history rows past their retention and
// returns them, for their audit rows: the row stays, marked, to number the
// fingerprint's next intent (its incarnation) until core.KeyMemory after
// its retention (sqlTombstonePurge).
var sqlTombstoneDeleteExpired = `
UPDATE idempotency_tombstones SET forgotten_at = ` + at("?2") + `
WHERE rowid IN (
	SELECT rowid FROM idempotency_tombstones
	WHERE retain_until <= ` + at("?2") + ` AND forgotten_at IS NULL
	ORDER BY retain_until
	LIMIT ?1
)
RETURNING tenant_id, tool, idempotency_key, args_hash, operation_id, status, coalesce(error_code, '')`

// sqlTombstonePurge deletes forgotten history rows core.KeyMemory past
// their retention.
var sqlTombstonePurge = `
DELETE FROM idempotency_tombstones
WHERE rowid IN (
	SELECT rowid FROM idempotency_tombstones
	WHERE forgotten_at IS NOT NULL
		AND retain_until <= strftime('%Y-%m-%dT%H:%M:%fZ', ` + at("?2") + `, '-` + fmt.Sprint(int64(core.KeyMemory/time.Second)) + ` seconds')
	ORDER BY retain_until
	LIMIT ?1
)`

// sqlGuardPrune deletes duplicate guards past their window whose
// operation no longer waits or runs.
var sqlGuardPrune = `
DELETE FROM fingerprint_guards
WHERE rowid IN (
	SELECT f.rowid FROM fingerprint_guards f
	WHERE f.guarded_until <= ` + at("?2") + `
		AND NOT EXISTS (SELECT 1 FROM idempotency_claims c
			WHERE c.operation_id = f.operation_id AND c.status IN ('awaiting_approval', 'queued', 'running'))
	ORDER BY f.guarded_until
	LIMIT ?1
)`

const sqlAuditInsert = `
INSERT INTO audit_events (tenant_id, user_id, token_id, request_id, tool, idempotency_key, operation_id, job_id,
	decision, reason, args_hash, args, result, duration_ms, client_request_id, trace_id)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)`

const sqlAuditListByKey = `
SELECT id, created_at, tenant_id, user_id, token_id, request_id, client_request_id, tool, idempotency_key,
	coalesce(operation_id, ''), coalesce(job_id, 0), decision, reason, args_hash, args, result,
	coalesce(duration_ms, 0), coalesce(trace_id, '')
FROM audit_events
WHERE tenant_id = ?1 AND tool = ?2 AND idempotency_key = ?3
ORDER BY id`

// allQueries are the gate's statements, which the store keeps prepared.
var allQueries = []string{
	sqlClaimInsert, sqlClaimGetByKey, sqlClaimGetByID, sqlClaimTakeOver, sqlClaimLease, sqlClaimLock,
	sqlClaimComplete, sqlClaimCompleteLocked, sqlClaimFail, sqlClaimRelease, sqlClaimReclaim, sqlClaimRedrive, sqlClaimSettle, sqlClaimAbandon,
	sqlClaimListOrphaned, sqlClaimListStalled, sqlClaimRepoint, sqlClaimList, sqlClaimListNewest, sqlJobGet, sqlClaimGetByOperation, sqlClaimListLeaseExpired, sqlClaimListTerminal, sqlClaimArchiveDelete, sqlClaimTakeOverHistory, sqlHistoryUpsert,
	sqlTombstoneGetByKey, sqlTombstoneDeleteExpired, sqlTombstonePurge, sqlAuditInsert,
	sqlAuditListByKey, sqlClaimApprove, sqlClaimDecline, sqlClaimListApprovalExpired, sqlApprovalPendingCount,
}

// Tokens, orders and seeding.

// tokenColumns are selected by every token query, in scanToken's order.
const tokenColumns = `id, tenant_id, user_id, scopes, token_hash, created_at, expires_at, revoked_at`

const sqlTokenInsert = `
INSERT INTO api_tokens (id, tenant_id, user_id, scopes, token_hash, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
RETURNING ` + tokenColumns

const sqlTokenGetByHash = `
SELECT ` + tokenColumns + `
FROM api_tokens
WHERE token_hash = ?1`

// Revoking twice keeps the first revoked_at. An empty ?2 means any tenant.
const sqlTokenRevoke = `
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, ` + sqlNow + `)
WHERE id = ?1 AND (?2 = '' OR tenant_id = ?2)
RETURNING ` + tokenColumns

const sqlTokenList = `
SELECT ` + tokenColumns + `
FROM api_tokens
WHERE tenant_id = ?1
ORDER BY created_at, id`

// Seeding inserts what is missing and never changes an existing row. One
// affected row means created, none means it existed. The built-in tools'
// rows (orders, customers, seats, users) are seeded by tools.Seed.

// A tenant's settings are inserted if it has none; NULL reset_link_base
// leaves the deployment's, NULL approval_mail_to mails nobody.
const sqlSeedTenant = `
INSERT INTO tenant_settings (tenant_id, reset_link_base, approval_mail_to)
VALUES (?1, ?2, ?3)
ON CONFLICT (tenant_id) DO NOTHING`

// sqlTenantApprovalMailTo reads a tenant's approval_mail_to
// (Store.TenantApprovalMailTo).
const sqlTenantApprovalMailTo = `
SELECT approval_mail_to FROM tenant_settings WHERE tenant_id = ?1`

// A fixed token value is inserted by hash if absent.
const sqlSeedTokenFixed = `
INSERT INTO api_tokens (id, tenant_id, user_id, scopes, token_hash, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (token_hash) DO NOTHING`

// sqlClaimCounts counts the claims by status (Driver.ClaimCounts).
const sqlClaimCounts = `SELECT status, count(*) FROM idempotency_claims GROUP BY status`

// The savepoint of core.Savepointer: one name, so that a rollback goes to
// the latest mark.
const (
	sqlSavepoint           = `SAVEPOINT idemgate_op`
	sqlRollbackToSavepoint = `ROLLBACK TO SAVEPOINT idemgate_op`
)
