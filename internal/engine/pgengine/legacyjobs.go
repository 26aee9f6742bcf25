package pgengine

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/jobs"
)

// sqlMoveLegacyJobs moves the unfinished claim jobs and approval notices
// of earlier releases from River's default queue to idemgate's queue and
// kinds. A claim job is told from a team's job on the same queue by its
// claim: same tenant, tool (its bare kind), key and operation.
const sqlMoveLegacyJobs = `
UPDATE river_job j
SET queue = $1,
	kind = CASE WHEN j.kind = $4 THEN $5 ELSE $2 || j.kind END
WHERE j.queue = $3
	AND j.state IN ('available', 'scheduled', 'retryable', 'pending')
	AND (j.kind = $4 OR EXISTS (
		SELECT 1 FROM idempotency_claims c
		WHERE c.tenant_id = j.args->>'tenant_id' AND c.tool = j.kind
			AND c.idempotency_key = j.args->>'idempotency_key'
			AND c.operation_id::text = j.args->>'operation_id'))`

// sqlDeleteLegacyMaintenance drops the unfinished reaper and pruner jobs
// of earlier releases: periodic, they carry nothing, and the workers
// insert their own on start.
const sqlDeleteLegacyMaintenance = `
DELETE FROM river_job
WHERE queue = $1 AND kind IN ($2, $3)
	AND state IN ('available', 'scheduled', 'retryable', 'pending')`

// MoveLegacyJobs moves the unfinished jobs of earlier releases to
// idemgate's queues and kinds (jobs.Legacy*), and reports how many it
// moved and dropped. Migrate runs it after the migrations; it is
// idempotent.
func MoveLegacyJobs(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (moved, dropped int64, err error) {
	tag, err := pool.Exec(ctx, sqlMoveLegacyJobs, jobs.Queue, jobs.Kind(""), enginesql.LegacyQueue,
		enginesql.LegacyApprovalNoticeKind, jobs.Kind("approval_notice"))
	if err != nil {
		return 0, 0, fmt.Errorf("pgengine: migrations: moving earlier releases' jobs: %w", err)
	}
	moved = tag.RowsAffected()
	tag, err = pool.Exec(ctx, sqlDeleteLegacyMaintenance, enginesql.LegacyMaintenanceQueue, enginesql.LegacyReaperKind, enginesql.LegacyPrunerKind)
	if err != nil {
		return moved, 0, fmt.Errorf("pgengine: migrations: dropping earlier releases' maintenance jobs: %w", err)
	}
	dropped = tag.RowsAffected()
	if moved+dropped > 0 && logger != nil {
		logger.InfoContext(ctx, "earlier releases' jobs moved to idemgate's queues",
			slog.String("queue", jobs.Queue), slog.Int64("moved", moved), slog.Int64("dropped", dropped))
	}
	return moved, dropped, nil
}
