package pgengine

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/core"
)

// All of the Postgres engine's SQL: the gate's statements (claims,
// tombstones, audit, River job reads), then tokens, orders and seeding,
// then the domain rows. $now parameters are nullable timestamptz overrides
// of the database clock, for tests only; production passes NULL and every
// comparison uses the database's now().

// computed returns claimComputed with clock parameter p, which may be NULL.
func computed(p string) string {
	return fmt.Sprintf(claimComputed, "coalesce("+p+"::timestamptz, now())")
}

// claimColumns are selected by every claim query, in scanClaim's order. The
// last two are computed against the clock given as the query's last
// parameter.
const claimColumns = `id, operation_id::text, tenant_id, tool, idempotency_key, user_id, args, args_hash,
	status, epoch, lease_expires_at, attempts, coalesce(job_id, 0), generation, downstream_key, ttl_seconds,
	result, error, last_error, first_called_at, created_at, updated_at, expires_at, approval_expires_at,
	approval_summary`

// claimComputed must follow claimColumns; %[1]s is the clock expression.
const claimComputed = `,
	(expires_at IS NOT NULL AND expires_at <= %[1]s) AS expired,
	(status = 'running' AND lease_expires_at > %[1]s) AS lease_live`

// sqlClaimInsert inserts unless the key is taken, or a live tombstone says
// this very intent (same fingerprint) already ran.
const sqlClaimInsert = `
INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash, status,
	ttl_seconds, retention_seconds, job_id, intent_key, approval_expires_at, approval_summary, incarnation)
SELECT $1::uuid, $2::text, $3::text, $4::text, $5::text, $6::jsonb, $7::text,
	CASE WHEN $12::double precision > 0 THEN 'awaiting_approval' ELSE 'queued' END, $8::integer, $9::integer,
	nullif($10::bigint, 0), nullif($11::text, ''),
	CASE WHEN $12::double precision > 0 THEN now() + make_interval(secs => $12::double precision) END,
	nullif($13::text, ''),
	coalesce((SELECT t.incarnation + 1 FROM idempotency_tombstones t
		WHERE t.tenant_id = $2 AND t.tool = $3 AND t.idempotency_key = $4 AND t.args_hash = $7), 0)
WHERE NOT EXISTS (
	SELECT 1 FROM idempotency_tombstones t
	WHERE t.tenant_id = $2 AND t.tool = $3 AND t.idempotency_key = $4 AND t.args_hash = $7 AND t.retain_until > now() AND t.forgotten_at IS NULL
)
ON CONFLICT (tenant_id, tool, idempotency_key) DO NOTHING
RETURNING ` + claimColumns + `, false, false`

// sqlClaimInsertMany is sqlClaimInsert for many rows (one array per
// column, $1-$10 in sqlClaimInsert's order, the intent keys $27, the
// duplicate windows $28 and confirmations $29: the guard of withGuard, the
// first row of a fingerprint in the group upserting it), inserted
// in the order given, with the audit rows ($11-$26, one array per column in
// enginesql.AuditArgs's order) of the claims it wrote only. A row whose key is taken, by a claim
// or by an earlier row, is skipped, as is one a tombstone refuses.
var sqlClaimInsertMany = `
WITH i AS (
	SELECT * FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]::jsonb[],
		$7::text[], $8::integer[], $9::integer[], $10::bigint[], $27::text[], $28::double precision[], $29::text[]) WITH ORDINALITY
		AS i(operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash, ttl_seconds, retention_seconds, job_id,
			intent_key, dup_window, confirm, n)
),
g AS (
	INSERT INTO fingerprint_guards AS f (tenant_id, tool, args_hash, operation_id, idempotency_key, guarded_until)
	SELECT DISTINCT ON (i.tenant_id, i.tool, i.args_hash) i.tenant_id, i.tool, i.args_hash, i.operation_id, i.idempotency_key,
		now() + make_interval(secs => i.dup_window)
	FROM i WHERE i.dup_window > 0
		-- only rows the claims insert below can write, as far as this
		-- snapshot knows: the key free, no history row refusing it
		AND NOT EXISTS (SELECT 1 FROM idempotency_claims c
			WHERE c.tenant_id = i.tenant_id AND c.tool = i.tool AND c.idempotency_key = i.idempotency_key)
		AND NOT EXISTS (SELECT 1 FROM idempotency_tombstones t
			WHERE t.tenant_id = i.tenant_id AND t.tool = i.tool AND t.idempotency_key = i.idempotency_key
				AND t.args_hash = i.args_hash AND t.retain_until > now() AND t.forgotten_at IS NULL)
	ORDER BY i.tenant_id, i.tool, i.args_hash, i.n
	ON CONFLICT (tenant_id, tool, args_hash) DO UPDATE SET
		operation_id = EXCLUDED.operation_id, idempotency_key = EXCLUDED.idempotency_key, guarded_until = EXCLUDED.guarded_until
	WHERE f.idempotency_key = EXCLUDED.idempotency_key
		OR f.operation_id = (SELECT nullif(i2.confirm, '')::uuid FROM i i2 WHERE i2.operation_id = EXCLUDED.operation_id)
		OR (f.guarded_until <= now() AND NOT EXISTS (
			SELECT 1 FROM idempotency_claims c
			WHERE c.operation_id = f.operation_id AND c.status IN ('awaiting_approval', 'queued', 'running')))
	RETURNING f.operation_id
),
c AS (
	INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash, status,
		ttl_seconds, retention_seconds, job_id, intent_key, incarnation)
	SELECT i.operation_id, i.tenant_id, i.tool, i.idempotency_key, i.user_id, i.args, i.args_hash, 'queued',
		i.ttl_seconds, i.retention_seconds, nullif(i.job_id, 0), nullif(i.intent_key, ''),
		coalesce((SELECT t.incarnation + 1 FROM idempotency_tombstones t
			WHERE t.tenant_id = i.tenant_id AND t.tool = i.tool AND t.idempotency_key = i.idempotency_key
				AND t.args_hash = i.args_hash), 0)
	FROM i
	WHERE (i.dup_window <= 0 OR i.operation_id IN (SELECT g.operation_id FROM g))
	AND NOT EXISTS (
		SELECT 1 FROM idempotency_tombstones t
		WHERE t.tenant_id = i.tenant_id AND t.tool = i.tool AND t.idempotency_key = i.idempotency_key
			AND t.args_hash = i.args_hash AND t.retain_until > now() AND t.forgotten_at IS NULL
	)
	ORDER BY i.n
	ON CONFLICT (tenant_id, tool, idempotency_key) DO NOTHING
	RETURNING ` + claimColumns + `, false, false
),
a AS (
	INSERT INTO audit_events (` + auditColumns + `)
	SELECT a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16
	FROM unnest($11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[]::uuid[],
		$18::bigint[], $19::text[], $20::text[], $21::text[], $22::text[]::jsonb[], $23::text[]::jsonb[],
		$24::double precision[], $25::text[], $26::text[])
		AS a(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16)
	WHERE a.a7 IN (SELECT c.operation_id::uuid FROM c)
)
SELECT * FROM c`

var sqlClaimGetByKey = `
SELECT ` + claimColumns + computed("$4") + `
FROM idempotency_claims
WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3`

// The tenant is checked on the row the operation id finds, never as an
// index condition: on a table without statistics the planner would
// otherwise cost a scan of the tenant's claims on the identity index (its
// first column) the same as the unique operation id, and a generic plan
// cached then would keep scanning them.
var sqlClaimGetByOperation = `
SELECT ` + claimColumns + computed("$3") + `
FROM idempotency_claims
WHERE operation_id = $2::uuid AND tenant_id || '' = $1`

var sqlClaimGetByID = `
SELECT ` + claimColumns + computed("$2") + `
FROM idempotency_claims
WHERE id = $1`

// historyUntil is the text of a history row's retain_until in audit
// reasons (the SQLite engine's time format, so both read alike).
const historyUntil = `to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`

// sqlHistoryUpsert keeps a fingerprint in its key's history; a live row of
// the same fingerprint (it cannot run twice) keeps its first operation, an
// expired one is replaced.
const sqlHistoryUpsert = `
	ON CONFLICT (tenant_id, tool, idempotency_key, args_hash) DO UPDATE SET
		operation_id = EXCLUDED.operation_id, status = EXCLUDED.status, error_code = EXCLUDED.error_code,
		expired_at = EXCLUDED.expired_at, retain_until = EXCLUDED.retain_until,
		incarnation = EXCLUDED.incarnation, forgotten_at = NULL
	WHERE idempotency_tombstones.retain_until <= %s OR idempotency_tombstones.forgotten_at IS NOT NULL`

// The take-over keeps epoch (fencing stays monotonic across intents) and
// resets everything else that belonged to the old intent, whose fingerprint
// it moves into the key's history with an archived audit row, in the same
// statement: a key that changes hands again still refuses every
// fingerprint that ran under it.
var sqlClaimTakeOver = `
WITH old AS (
	SELECT id AS o_id, tenant_id AS o_tenant_id, tool AS o_tool, idempotency_key AS o_key, args_hash AS o_args_hash,
		operation_id AS o_operation_id, job_id AS o_job_id, status AS o_status, error->>'code' AS o_error_code,
		expires_at AS o_expires_at, expires_at + make_interval(secs => retention_seconds) AS o_retain_until,
		incarnation AS o_incarnation
	FROM idempotency_claims
	WHERE id = $1 AND status IN ('succeeded', 'failed') AND expires_at <= coalesce($7::timestamptz, now())
	FOR UPDATE
), kept AS (
	INSERT INTO idempotency_tombstones (tenant_id, tool, idempotency_key, args_hash, operation_id, status, error_code,
		expired_at, retain_until, incarnation)
	SELECT o_tenant_id, o_tool, o_key, o_args_hash, o_operation_id, o_status, o_error_code, o_expires_at, o_retain_until,
		o_incarnation
	FROM old` + fmt.Sprintf(sqlHistoryUpsert, "coalesce($7::timestamptz, now())") + `
), logged AS (
	INSERT INTO audit_events (tenant_id, user_id, tool, idempotency_key, operation_id, job_id, decision, reason,
		args_hash, result)
	SELECT o_tenant_id, '` + core.WorkerUser + `', o_tool, o_key, o_operation_id, o_job_id, 'archived',
		'taken over by operation ' || $2::text || '; the fingerprint stays in the key''s history until ' ||
		` + fmt.Sprintf(historyUntil, "o_retain_until") + `,
		o_args_hash, jsonb_strip_nulls(jsonb_build_object('status', o_status, 'error_code', o_error_code))
	FROM old
)
UPDATE idempotency_claims SET
	operation_id = $2::uuid, user_id = $3, args = $4, args_hash = $5, ttl_seconds = $6, retention_seconds = $8,
	intent_key = nullif($10::text, ''),
	incarnation = coalesce((SELECT t.incarnation + 1 FROM idempotency_tombstones t
		WHERE t.tenant_id = old.o_tenant_id AND t.tool = old.o_tool AND t.idempotency_key = old.o_key
			AND t.args_hash = $5), 0),
	status = CASE WHEN $11::double precision > 0 THEN 'awaiting_approval' ELSE 'queued' END,
	approval_expires_at = CASE WHEN $11::double precision > 0
		THEN coalesce($7::timestamptz, now()) + make_interval(secs => $11::double precision) END,
	approval_summary = nullif($12::text, ''),
	lease_expires_at = NULL, attempts = 0, job_id = nullif($9::bigint, 0), generation = 0,
	result = NULL, error = NULL, last_error = NULL, first_called_at = NULL,
	created_at = now(), updated_at = now(), expires_at = NULL
FROM old
WHERE id = old.o_id
RETURNING ` + claimColumns + `, false, false`

var sqlClaimLease = `
UPDATE idempotency_claims SET
	status = 'running', epoch = epoch + 1, attempts = attempts + 1,
	lease_expires_at = coalesce($4::timestamptz, now()) + make_interval(secs => $3::double precision),
	first_called_at = coalesce(first_called_at, coalesce($4::timestamptz, now())),
	updated_at = now()
WHERE operation_id = $1::uuid AND job_id = $2
	AND (status = 'queued' OR (status = 'running' AND lease_expires_at <= coalesce($4::timestamptz, now())))
RETURNING ` + claimColumns + computed("$4")

// sqlClaimLock is the lease's condition, locking instead of writing. The
// completion changes no key column, so the weaker NO KEY lock suffices.
var sqlClaimLock = `
SELECT ` + claimColumns + computed("$3") + `
FROM idempotency_claims
WHERE operation_id = $1::uuid AND job_id = $2
	AND (status = 'queued' OR (status = 'running' AND lease_expires_at <= coalesce($3::timestamptz, now())))
FOR NO KEY UPDATE`

// sqlClaimCompleteLocked completes a claim sqlClaimLock locked: the lease
// and the completion in one write.
var sqlClaimCompleteLocked = `
UPDATE idempotency_claims SET
	status = 'succeeded', epoch = epoch + 1, attempts = attempts + 1,
	first_called_at = coalesce(first_called_at, coalesce($4::timestamptz, now())),
	result = $3, error = NULL, lease_expires_at = NULL, updated_at = now(),
	expires_at = coalesce($4::timestamptz, now()) + make_interval(secs => ttl_seconds)
WHERE id = $1 AND epoch = $2
	AND (status = 'queued' OR (status = 'running' AND lease_expires_at <= coalesce($4::timestamptz, now())))
RETURNING ` + claimColumns + computed("$4")

var sqlClaimComplete = `
UPDATE idempotency_claims SET
	status = 'succeeded', result = $3, error = NULL, lease_expires_at = NULL, updated_at = now(),
	expires_at = coalesce($4::timestamptz, now()) + make_interval(secs => ttl_seconds)
WHERE id = $1 AND status = 'running' AND epoch = $2
RETURNING ` + claimColumns + computed("$4")

var sqlClaimFail = `
UPDATE idempotency_claims SET
	status = 'failed', error = $3, lease_expires_at = NULL, updated_at = now(),
	expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => ttl_seconds)
WHERE id = $1 AND status = 'running' AND epoch = $2
	AND (NOT $4::boolean OR lease_expires_at <= coalesce($5::timestamptz, now()))
RETURNING ` + claimColumns + computed("$5")

const sqlClaimRelease = `
UPDATE idempotency_claims SET
	status = 'queued', lease_expires_at = NULL, last_error = $3, updated_at = now()
WHERE id = $1 AND status = 'running' AND epoch = $2
RETURNING ` + claimColumns + `, false, false`

var sqlClaimReclaim = `
UPDATE idempotency_claims SET
	status = 'queued', lease_expires_at = NULL, job_id = $3, updated_at = now()
WHERE id = $1 AND status = 'running' AND epoch = $2 AND lease_expires_at <= coalesce($4::timestamptz, now())
RETURNING ` + claimColumns + computed("$4")

// sqlClaimSettle stores a provider's outcome of a claim whose outcome was
// unknown (core.EventSettle, core.EventSettleFailed): $4 NULL succeeds it.
var sqlClaimSettle = `
UPDATE idempotency_claims SET
	status = CASE WHEN $4::jsonb IS NULL THEN 'succeeded' ELSE 'failed' END,
	result = $3, error = $4, epoch = epoch + 1, lease_expires_at = NULL, updated_at = now(),
	expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => ttl_seconds)
WHERE id = $1 AND epoch = $2
	AND ((status = 'failed' AND error->>'code' = 'outcome_unknown')
		OR (status = 'running' AND lease_expires_at <= coalesce($5::timestamptz, now())))
RETURNING ` + claimColumns + computed("$5")

// sqlClaimRedrive re-drives a failed claim; one its owner cancelled is
// final (core.ErrRedriveCancelled), as is one denied or expired awaiting
// approval (core.ErrRedriveApproval).
const sqlClaimRedrive = `
UPDATE idempotency_claims SET
	status = 'queued',
	generation = generation + CASE WHEN $2::boolean THEN 1 ELSE 0 END,
	first_called_at = CASE WHEN $2::boolean THEN NULL ELSE first_called_at END,
	job_id = coalesce(nullif($3::bigint, 0), job_id),
	attempts = 0, result = NULL, error = NULL, lease_expires_at = NULL, expires_at = NULL, updated_at = now()
WHERE id = $1 AND status = 'failed' AND coalesce(error->>'code', '') NOT IN ('cancelled', 'approval_denied', 'approval_expired')
RETURNING ` + claimColumns + `, false, false`

const sqlClaimListTerminal = `
SELECT id FROM idempotency_claims WHERE id = ANY($1::bigint[]) AND status IN ('succeeded', 'failed')`

var sqlClaimListLeaseExpired = `
SELECT ` + claimColumns + computed("$2") + `
FROM idempotency_claims
WHERE status = 'running' AND lease_expires_at <= coalesce($2::timestamptz, now())
ORDER BY lease_expires_at
LIMIT $1`

// sqlClaimArchiveExpired moves expired terminal claims into their keys'
// history with an archived audit row each, in one statement under one
// now: the claims deleted are exactly those kept. It affects one audit row
// per claim archived.
var sqlClaimArchiveExpired = `
WITH doomed AS (
	SELECT id FROM idempotency_claims
	WHERE expires_at <= coalesce($2::timestamptz, now()) AND status IN ('succeeded', 'failed')
	ORDER BY expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), moved AS (
	DELETE FROM idempotency_claims c
	USING doomed
	WHERE c.id = doomed.id AND c.status IN ('succeeded', 'failed') AND c.expires_at <= coalesce($2::timestamptz, now())
	RETURNING c.tenant_id, c.tool, c.idempotency_key, c.args_hash, c.operation_id, c.job_id, c.status,
		c.error->>'code' AS error_code, c.expires_at, c.expires_at + make_interval(secs => c.retention_seconds) AS retain_until,
		c.incarnation
), kept AS (
	INSERT INTO idempotency_tombstones (tenant_id, tool, idempotency_key, args_hash, operation_id, status, error_code,
		expired_at, retain_until, incarnation)
	SELECT tenant_id, tool, idempotency_key, args_hash, operation_id, status, error_code, expires_at, retain_until,
		incarnation
	FROM moved` + fmt.Sprintf(sqlHistoryUpsert, "coalesce($2::timestamptz, now())") + `
)
INSERT INTO audit_events (tenant_id, user_id, tool, idempotency_key, operation_id, job_id, decision, reason,
	args_hash, result)
SELECT tenant_id, '` + core.WorkerUser + `', tool, idempotency_key, operation_id, job_id, 'archived',
	'replay window ended; the fingerprint stays in the key''s history until ' || ` + fmt.Sprintf(historyUntil, "retain_until") + `,
	args_hash, jsonb_strip_nulls(jsonb_build_object('status', status, 'error_code', error_code))
FROM moved`

// sqlTombstoneGetByKey reads the live history row of one fingerprint.
const sqlTombstoneGetByKey = `
SELECT tenant_id, tool, idempotency_key, args_hash, operation_id::text, status, coalesce(error_code, ''), expired_at, retain_until
FROM idempotency_tombstones
WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3 AND args_hash = $4
	AND retain_until > coalesce($5::timestamptz, now()) AND forgotten_at IS NULL`

// sqlTombstoneDeleteExpired forgets history rows past their retention
// (and deletes duplicate guards past their window whose operation no
// longer waits or runs),
// with a forgotten audit row each (it affects one audit row per row
// forgotten): the row stays, marked, to number the fingerprint's next
// intent (its incarnation) until core.KeyMemory after its retention, when
// it is deleted.
var sqlTombstoneDeleteExpired = `
WITH gone AS (
	UPDATE idempotency_tombstones SET forgotten_at = coalesce($2::timestamptz, now())
	WHERE ctid IN (
		SELECT ctid FROM idempotency_tombstones
		WHERE retain_until <= coalesce($2::timestamptz, now()) AND forgotten_at IS NULL
		ORDER BY retain_until
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	)
	RETURNING tenant_id, tool, idempotency_key, args_hash, operation_id, status, error_code
), purged AS (
	DELETE FROM idempotency_tombstones
	WHERE ctid IN (
		SELECT ctid FROM idempotency_tombstones
		WHERE forgotten_at IS NOT NULL
			AND retain_until <= coalesce($2::timestamptz, now()) - make_interval(secs => ` + fmt.Sprint(int64(core.KeyMemory/time.Second)) + `)
		ORDER BY retain_until
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	)
), guards AS (
	DELETE FROM fingerprint_guards
	WHERE ctid IN (
		SELECT f.ctid FROM fingerprint_guards f
		WHERE f.guarded_until <= coalesce($2::timestamptz, now())
			AND NOT EXISTS (SELECT 1 FROM idempotency_claims c
				WHERE c.operation_id = f.operation_id AND c.status IN ('awaiting_approval', 'queued', 'running'))
		ORDER BY f.guarded_until
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	)
)
INSERT INTO audit_events (tenant_id, user_id, tool, idempotency_key, operation_id, decision, reason, args_hash, result)
SELECT tenant_id, '` + core.WorkerUser + `', tool, idempotency_key, operation_id, 'forgotten',
	'retention ended; the fingerprint may run again under this key', args_hash,
	jsonb_strip_nulls(jsonb_build_object('status', status, 'error_code', error_code))
FROM gone`

const auditColumns = `tenant_id, user_id, token_id, request_id, tool, idempotency_key, operation_id, job_id,
	decision, reason, args_hash, args, result, duration_ms, client_request_id, trace_id`

const sqlAuditInsert = `
INSERT INTO audit_events (` + auditColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`

// sqlAuditInsertMany appends many rows in one statement: one array per
// column, in enginesql.AuditArgs's order.
const sqlAuditInsertMany = `
INSERT INTO audit_events (` + auditColumns + `)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]::uuid[],
	$8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[]::jsonb[], $13::text[]::jsonb[],
	$14::double precision[], $15::text[], $16::text[])`

// auditTypes are the types of the audit row's parameters, in
// enginesql.AuditArgs's order; the reason is the tenth.
var auditTypes = []string{"text", "text", "text", "text", "text", "text", "uuid", "bigint",
	"text", "text", "text", "jsonb", "jsonb", "double precision", "text", "text"}

// withAudit wraps claimSQL, a write of n parameters returning one claim,
// so that the same statement appends an audit row when it writes: its 16
// parameters ($n+1 on, enginesql.AuditArgs's order) follow claimSQL's.
// fromClaim replaces parameters by SQL expressions over the written claim
// c, by index in that order.
func withAudit(claimSQL string, n int, fromClaim map[int]string) string {
	values := make([]string, len(auditTypes))
	for i, typ := range auditTypes {
		values[i] = fmt.Sprintf("$%d::%s", n+1+i, typ)
		if expr, ok := fromClaim[i]; ok {
			// The parameter is still sent; coalesce keeps its type known.
			values[i] = fmt.Sprintf("coalesce(%s, %s)", expr, values[i])
		}
	}
	return "WITH c AS (" + claimSQL + "),\na AS (INSERT INTO audit_events (" + auditColumns + ")\n\tSELECT " +
		strings.Join(values, ", ") + " FROM c)\nSELECT * FROM c"
}

// withGuard is an audited sqlClaimInsert behind the duplicate guard
// (core.ClaimInsertParams.DuplicateWindow): the guard row of the claim's
// (tenant, tool, fingerprint) is upserted first, to name this claim until
// now() plus $30 seconds, unless it names another key's operation that is
// within its window or still waits or runs, and is not the confirmed one
// ($31); the claim is inserted only if the guard let it. A refused upsert
// still locks the guard row, so FingerprintGuardGet reads it as it stands
// in the same transaction. Postgres's ON CONFLICT waits for a concurrent
// claim of the same fingerprint and judges its committed row: two such
// calls at once cannot both pass.
func withGuard() string {
	audited := withAudit(sqlClaimInsert, 13, nil)
	claim := strings.Replace(audited, "WHERE NOT EXISTS (", "WHERE EXISTS (SELECT 1 FROM g) AND NOT EXISTS (", 1)
	return "WITH g AS (" + sqlGuardUpsert + "),\n" + strings.TrimPrefix(claim, "WITH ")
}

const sqlGuardUpsert = `
INSERT INTO fingerprint_guards AS f (tenant_id, tool, args_hash, operation_id, idempotency_key, guarded_until)
VALUES ($2, $3, $7, $1::uuid, $4, now() + make_interval(secs => $30::double precision))
ON CONFLICT (tenant_id, tool, args_hash) DO UPDATE SET
	operation_id = EXCLUDED.operation_id, idempotency_key = EXCLUDED.idempotency_key, guarded_until = EXCLUDED.guarded_until
WHERE f.idempotency_key = EXCLUDED.idempotency_key
	OR f.operation_id = nullif($31::text, '')::uuid
	OR (f.guarded_until <= now() AND NOT EXISTS (
		SELECT 1 FROM idempotency_claims c
		WHERE c.operation_id = f.operation_id AND c.status IN ('awaiting_approval', 'queued', 'running')))
RETURNING 1`

// sqlGuardRepoint and sqlGuardDelete mend the guards that name operations
// whose claims a group did not write (their keys were taken meanwhile): a
// guard whose key's claim has its fingerprint names that claim, and the
// others are deleted.
const (
	sqlGuardRepoint = `
UPDATE fingerprint_guards f SET operation_id = c.operation_id
FROM idempotency_claims c
WHERE f.operation_id = ANY($1::text[]::uuid[])
	AND c.tenant_id = f.tenant_id AND c.tool = f.tool AND c.idempotency_key = f.idempotency_key AND c.args_hash = f.args_hash`
	sqlGuardDelete = `DELETE FROM fingerprint_guards WHERE operation_id = ANY($1::text[]::uuid[])`
)

const sqlGuardGet = `
SELECT operation_id::text, idempotency_key, guarded_until
FROM fingerprint_guards
WHERE tenant_id = $1 AND tool = $2 AND args_hash = $3`

// The writes that take their audit row along.
var (
	sqlClaimInsertGuarded = withGuard()
	sqlClaimInsertAudited = withAudit(sqlClaimInsert, 13, nil)
	// The lease's row names the attempt and the epoch (enginesql.LeaseReason)
	// and the claim's fingerprint, which the job does not carry.
	sqlClaimLeaseAudited = withAudit(sqlClaimLease, 4, map[int]string{
		9: "'attempt ' || c.attempts || ', epoch ' || c.epoch", 10: "c.args_hash"})
	sqlClaimCompleteAudited       = withAudit(sqlClaimComplete, 4, nil)
	sqlClaimCompleteLockedAudited = withAudit(sqlClaimCompleteLocked, 4, nil)
)

const sqlAuditListByKey = `
SELECT id, created_at, tenant_id, user_id, token_id, request_id, client_request_id, tool, idempotency_key,
	coalesce(operation_id::text, ''), coalesce(job_id, 0), decision, reason, args_hash, args, result,
	coalesce(duration_ms, 0), coalesce(trace_id, '')
FROM audit_events
WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3
ORDER BY id`

// A claim awaiting approval has no job: JobID zero holds it.
var sqlClaimAbandon = `
UPDATE idempotency_claims SET
	status = 'failed', error = $4, lease_expires_at = NULL, approval_expires_at = NULL, updated_at = now(),
	expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => ttl_seconds)
WHERE id = $1 AND epoch = $2 AND coalesce(job_id, 0) = $3
	AND (status IN ('queued', 'awaiting_approval')
		OR (status = 'running' AND lease_expires_at <= coalesce($5::timestamptz, now())))
RETURNING ` + claimColumns + computed("$5")

// sqlClaimApprove queues a claim awaiting approval, of the approved
// fingerprint and within its window, pointing at the job inserted in the
// same transaction.
var sqlClaimApprove = `
UPDATE idempotency_claims SET
	status = 'queued', job_id = $3, approval_expires_at = NULL, updated_at = now()
WHERE id = $1 AND status = 'awaiting_approval' AND args_hash = $2
	AND approval_expires_at > coalesce($4::timestamptz, now())
RETURNING ` + claimColumns + computed("$4")

// sqlClaimDecline fails a claim awaiting approval: a denial ($3 false)
// within its window, an expiry ($3 true) after it.
var sqlClaimDecline = `
UPDATE idempotency_claims SET
	status = 'failed', error = $2, approval_expires_at = NULL, updated_at = now(),
	expires_at = coalesce($4::timestamptz, now()) + make_interval(secs => ttl_seconds)
WHERE id = $1 AND status = 'awaiting_approval'
	AND (approval_expires_at <= coalesce($4::timestamptz, now())) = $3::boolean
RETURNING ` + claimColumns + computed("$4")

var sqlClaimListApprovalExpired = `
SELECT ` + claimColumns + computed("$2") + `
FROM idempotency_claims
WHERE status = 'awaiting_approval' AND approval_expires_at <= coalesce($2::timestamptz, now())
ORDER BY approval_expires_at
LIMIT $1`

// sqlApprovalLock takes the tenant's approval lock until the transaction
// ends (core.Executor.ApprovalPendingCount); a hash collision between two
// tenants only makes them wait for each other.
const sqlApprovalLock = `SELECT pg_advisory_xact_lock(hashtextextended('idemgate.approvals_pending/' || $1, 0))`

// sqlApprovalPendingCount counts a tenant's claims awaiting approval whose
// window is open (idempotency_claims_approval_idx), in a statement after
// the lock so that its snapshot sees every claim committed under it.
const sqlApprovalPendingCount = `
SELECT count(*) FROM idempotency_claims
WHERE status = 'awaiting_approval' AND tenant_id = $1 AND approval_expires_at > coalesce($2::timestamptz, now())`

// A claim is orphaned when it waits on a job that will never run it again.
var sqlClaimListOrphaned = `
SELECT ` + claimColumns + computed("$2") + `
FROM idempotency_claims c
WHERE c.status IN ('queued', 'running')
	AND NOT (c.status = 'running' AND c.lease_expires_at > coalesce($2::timestamptz, now()))
	AND c.job_id IS NOT NULL
	AND NOT EXISTS (
		SELECT 1 FROM river_job j
		WHERE j.id = c.job_id AND j.state NOT IN ('completed', 'cancelled', 'discarded')
	)
ORDER BY c.id
LIMIT $1`

var sqlClaimList = `
SELECT ` + claimColumns + computed("NULL") + `
FROM idempotency_claims
WHERE ($1 = '' OR tenant_id = $1)
	AND ($2 = '' OR tool = $2)
	AND ($3 = '' OR status = $3)
	AND ($4::timestamptz IS NULL OR updated_at >= $4::timestamptz)
	AND ($6 = '' OR args->>$6 = $7)
ORDER BY updated_at DESC, id DESC
LIMIT $5`

// sqlClaimListNewest pages one tenant's claims by creation, newest first,
// on idempotency_claims_tenant_newest_idx, a partial index: its predicate
// (created_at IS NOT NULL, always true) is stated here so that this query
// may use it and no other does (migration 00010).
var sqlClaimListNewest = `
SELECT ` + claimColumns + computed("NULL") + `
FROM idempotency_claims
WHERE tenant_id = $1 AND created_at IS NOT NULL
	AND ($2 = '' OR tool = $2)
	AND ($3 = '' OR status = $3)
	AND ($4::timestamptz IS NULL OR (created_at, id) < ($4::timestamptz, $5::bigint))
	AND ($7 = '' OR args->>$7 = $8)
ORDER BY created_at DESC, id DESC
LIMIT $6`

// sqlJobGet reads a River job; next_run_at only for a job River will run
// again by itself.
const sqlJobGet = `
SELECT id, state::text,
	CASE WHEN state IN ('available', 'scheduled', 'retryable') THEN greatest(scheduled_at, now()) END,
	metadata ? 'cancel_attempted_at'
FROM river_job
WHERE id = $1`

// sqlJobGetLocked is sqlJobGet holding the row: River's fetch skips locked
// rows, so no worker takes the job until the transaction ends.
const sqlJobGetLocked = sqlJobGet + `
FOR UPDATE`

var sqlClaimListStalled = `
SELECT ` + claimColumns + computed("$2") + `
FROM idempotency_claims c
WHERE c.status = 'queued'
	AND EXISTS (
		SELECT 1 FROM river_job j
		WHERE j.id = c.job_id AND j.state = 'running'
			AND j.attempted_at <= coalesce($2::timestamptz, now()) - make_interval(secs => $3::double precision)
	)
ORDER BY c.id
LIMIT $1`

const sqlClaimRepoint = `
UPDATE idempotency_claims SET job_id = $4, updated_at = now()
WHERE id = $1 AND status = 'queued' AND epoch = $2 AND job_id = $3
RETURNING ` + claimColumns + `, false, false`

// Tokens, orders and seeding.

// tokenColumns are selected by every token query, in scanToken's order.
const tokenColumns = `id, tenant_id, user_id, scopes, token_hash, created_at, expires_at, revoked_at`

const sqlTokenInsert = `
INSERT INTO api_tokens (id, tenant_id, user_id, scopes, token_hash, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING ` + tokenColumns

const sqlTokenGetByHash = `
SELECT ` + tokenColumns + `
FROM api_tokens
WHERE token_hash = $1`

// Revoking twice keeps the first revoked_at. An empty $2 means any tenant.
const sqlTokenRevoke = `
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1 AND ($2::text = '' OR tenant_id = $2::text)
RETURNING ` + tokenColumns

const sqlTokenList = `
SELECT ` + tokenColumns + `
FROM api_tokens
WHERE tenant_id = $1
ORDER BY created_at, id`

// Seeding inserts what is missing and never changes an existing row. One
// affected row means created, none means it existed. The built-in tools'
// rows (orders, customers, seats, users) are seeded by tools.Seed.

// A tenant's settings are inserted if it has none; NULL reset_link_base
// leaves the deployment's, NULL approval_mail_to mails nobody.
const sqlSeedTenant = `
INSERT INTO tenant_settings (tenant_id, reset_link_base, approval_mail_to)
VALUES ($1, $2, $3)
ON CONFLICT (tenant_id) DO NOTHING`

// sqlTenantApprovalMailTo reads a tenant's approval_mail_to
// (Store.TenantApprovalMailTo).
const sqlTenantApprovalMailTo = `
SELECT approval_mail_to FROM tenant_settings WHERE tenant_id = $1`

// A fixed token value is inserted by hash if absent.
const sqlSeedTokenFixed = `
INSERT INTO api_tokens (id, tenant_id, user_id, scopes, token_hash, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (token_hash) DO NOTHING`

// sqlClaimCounts counts the claims by status (Driver.ClaimCounts).
const sqlClaimCounts = `SELECT status, count(*) FROM idempotency_claims GROUP BY status`

// The savepoint of core.Savepointer: one name, so that a rollback goes to
// the latest mark.
const (
	sqlSavepoint           = `SAVEPOINT idemgate_op`
	sqlRollbackToSavepoint = `ROLLBACK TO SAVEPOINT idemgate_op`
)

// A worker group's pipelined transaction (pipetx.go): its BEGIN and COMMIT,
// and the check sent between its last completion and COMMIT, which fails
// (division by zero) unless the claim is succeeded at the epoch that
// completion wrote, so that a completion matching no row commits nothing.
const (
	sqlBeginReadCommitted  = `BEGIN ISOLATION LEVEL READ COMMITTED`
	sqlCommit              = `COMMIT`
	sqlClaimCompletedCheck = `SELECT 1 / count(*) FROM idempotency_claims WHERE id = $1 AND epoch = $2 AND status = 'succeeded'`
)
