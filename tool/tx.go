package tool

import "context"

// Engine names the database a Tx runs on.
type Engine string

// The engines.
const (
	Postgres Engine = "postgres"
	SQLite   Engine = "sqlite"
)

// Tx is the completing transaction as an effect sees it. Queries use $1,
// $2, … placeholders on both engines. Missing rows are domain.ErrNotFound.
type Tx interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query expected to return at most one row.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Engine names the database.
	Engine() Engine
	// Raw is the engine's transaction: pgx.Tx or *sql.Tx. The built-in
	// tools' domain writes (store.Domain) still take it.
	Raw() any
}

// Row is one row of QueryRow.
type Row interface {
	// Scan copies the row's columns into dest; no row is domain.ErrNotFound.
	Scan(dest ...any) error
}
