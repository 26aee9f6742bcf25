package core

// Engine names, as gate.Postgres and gate.SQLite.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// Row is one row of an effect transaction's QueryRow: the same type as
// gate.Row, so that an engine's transaction is a gate.Tx without the engine
// importing the public API.
type Row = interface {
	Scan(dest ...any) error
}

// Rows are the rows of an effect transaction's Query: the same type as
// gate.Rows.
type Rows = interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}
