package gate

import "context"

// The engines, as Tx.Engine names them.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// Tx is the completing transaction as an effect sees it. Queries use $1,
// $2, … placeholders on both engines. Missing rows are ErrNotFound. To
// run the team's own pgx or sqlc code in it, see EngineTx.
type Tx interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query that returns rows. Close the rows when done.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
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

// Rows are the rows of Tx.Query, read as database/sql's are: Next, Scan,
// then Err once Next reports false; Close frees them.
type Rows = interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// EngineTx returns the engine's own transaction under tx, when it is a T:
// a pgx.Tx (github.com/jackc/pgx/v5) on Postgres, a *sql.Tx on SQLite.
// It is the transaction (or, in a worker's group, the savepoint) the
// effect runs in: what the team's pgx or sqlc code writes through it
// commits or rolls back with the claim. The gate ends it: never Commit or
// Rollback it (on Postgres both are refused).
func EngineTx[T any](tx Tx) (T, bool) {
	var zero T
	e, ok := tx.(interface{ EngineTx() any })
	if !ok {
		return zero, false
	}
	t, ok := e.EngineTx().(T)
	return t, ok
}
