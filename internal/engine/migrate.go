package engine

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/idemgate/idemgate/migrations"
)

// LegacyLastVersion is the last core version that releases before
// migrations.Table recorded in goose's default table (goose_db_version).
// Later versions are only ever recorded in migrations.Table.
const LegacyLastVersion = 14

// AdoptLegacyVersions gives a database migrated by a release that recorded
// idemgate's core versions in goose's default table its own version table:
// when migrations.Table does not exist, goose_db_version does and so do
// idemgate's tables (idempotency_claims), it creates migrations.Table
// (through store, whose table it is) and copies into it goose_db_version's
// rows of versions 0 to LegacyLastVersion, within tx, and reports how many
// rows it copied. goose_db_version is left as it is: it may be a team's
// own. exists reports, within tx, whether a table exists.
func AdoptLegacyVersions(ctx context.Context, tx *sql.Tx, store database.Store, exists func(ctx context.Context, tx *sql.Tx, table string) (bool, error)) (int, error) {
	if store.Tablename() != migrations.Table {
		return 0, fmt.Errorf("adopt versions: store of %s, not %s", store.Tablename(), migrations.Table)
	}
	for _, want := range []struct {
		table  string
		exists bool
	}{{migrations.Table, false}, {goose.DefaultTablename, true}, {"idempotency_claims", true}} {
		ok, err := exists(ctx, tx, want.table)
		if err != nil {
			return 0, fmt.Errorf("adopt versions: look up %s: %w", want.table, err)
		}
		if ok != want.exists {
			return 0, nil
		}
	}
	if err := store.CreateVersionTable(ctx, tx); err != nil {
		return 0, fmt.Errorf("adopt versions: create %s: %w", migrations.Table, err)
	}
	res, err := tx.ExecContext(ctx, fmt.Sprintf(
		"INSERT INTO %s (version_id, is_applied, tstamp) SELECT version_id, is_applied, tstamp FROM %s WHERE version_id BETWEEN 0 AND %d ORDER BY id",
		migrations.Table, goose.DefaultTablename, LegacyLastVersion))
	if err != nil {
		return 0, fmt.Errorf("adopt versions: copy from %s: %w", goose.DefaultTablename, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("adopt versions: %w", err)
	}
	return int(n), nil
}
