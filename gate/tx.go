package gate

import "context"

// The engines, as Tx.Engine names them.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// Tx is the completing transaction as an effect sees it. Queries use $1,
// $2, … placeholders on both engines. Missing rows are ErrNotFound.
type Tx interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query expected to return at most one row.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Engine names the database: Postgres or SQLite.
	Engine() string
}

// Row is one row of Tx.QueryRow: Scan copies its columns into dest; no
// row is ErrNotFound.
type Row = interface {
	Scan(dest ...any) error
}
