package sqliteengine_test

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/sqlitetest"
)

// legacyArgs is a job as earlier releases, or a team, inserted it.
type legacyArgs struct {
	kind           string
	TenantID       string `json:"tenant_id,omitempty"`
	OperationID    string `json:"operation_id,omitempty"`
	Tool           string `json:"tool,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

func (a legacyArgs) Kind() string { return a.kind }

// Migrate moves earlier releases' unfinished claim jobs and approval
// notices from River's default queue to idemgate's queue and kinds, drops
// their unfinished reaper and pruner jobs, and leaves alone finished jobs
// and a team's jobs on the default queue, even one whose kind is a tool's
// name; a second Migrate changes nothing.
func TestMigrateMovesLegacyJobsSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, db := sqlitetest.NewDB(t)
	const op1, op2 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	for _, c := range []struct{ op, key string }{{op1, "key-1"}, {op2, "key-2"}} {
		_, err := db.ExecContext(ctx, `INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, args, args_hash, status, ttl_seconds)
			VALUES (?1, 'acme', 'refund_order', ?2, '{}', 'h', 'queued', 3600)`, c.op, c.key)
		require.NoError(t, err)
	}
	client, err := river.NewClient(riversqlite.New(db), &river.Config{})
	require.NoError(t, err)
	insert := func(args legacyArgs, opts *river.InsertOpts) int64 {
		res, err := client.Insert(ctx, args, opts)
		require.NoError(t, err)
		return res.Job.ID
	}
	claim := func(op, key string) legacyArgs {
		return legacyArgs{kind: "refund_order", TenantID: "acme", OperationID: op, Tool: "refund_order", IdempotencyKey: key}
	}
	available := insert(claim(op1, "key-1"), nil)
	scheduled := insert(claim(op2, "key-2"), &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	finished := insert(claim(op1, "key-1"), nil)
	_, err = db.ExecContext(ctx, `UPDATE river_job SET state = 'completed', finalized_at = datetime('now', 'subsec') WHERE id = ?1`, finished)
	require.NoError(t, err)
	notice := insert(legacyArgs{kind: enginesql.LegacyApprovalNoticeKind, TenantID: "acme", OperationID: op1}, nil)
	// A team's jobs: its own kind, and a tool's name with no claim of it.
	team := insert(legacyArgs{kind: "team_ping"}, nil)
	teamTool := insert(legacyArgs{kind: "refund_order", TenantID: "acme", OperationID: "33333333-3333-4333-8333-333333333333",
		Tool: "refund_order", IdempotencyKey: "key-1"}, nil)
	reaper := insert(legacyArgs{kind: enginesql.LegacyReaperKind}, &river.InsertOpts{Queue: enginesql.LegacyMaintenanceQueue})

	_, err = sqliteengine.Migrate(ctx, db, nil)
	require.NoError(t, err)
	where := func(id int64) string {
		var queue, kind string
		err := db.QueryRowContext(ctx, `SELECT queue, kind FROM river_job WHERE id = ?1`, id).Scan(&queue, &kind)
		if err != nil {
			return "gone"
		}
		return queue + " " + kind
	}
	want := map[int64]string{
		available: "idemgate idemgate.refund_order",
		scheduled: "idemgate idemgate.refund_order",
		finished:  "default refund_order",
		notice:    "idemgate idemgate.approval_notice",
		team:      "default team_ping",
		teamTool:  "default refund_order",
		reaper:    "gone",
	}
	check := func() {
		for id, w := range want {
			require.Equal(t, w, where(id), "job %d", id)
		}
	}
	check()
	moved, dropped, err := sqliteengine.MoveLegacyJobs(ctx, db, nil)
	require.NoError(t, err)
	require.Zero(t, moved+dropped)
	check()
}
