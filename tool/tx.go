package tool

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/gate"
)

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
	// Raw is the engine's transaction: pgx.Tx or *sql.Tx.
	Raw() any
}

// Row is one row of QueryRow.
type Row interface {
	// Scan copies the row's columns into dest; no row is domain.ErrNotFound.
	Scan(dest ...any) error
}

// WrapTx adapts a gate store transaction to Tx.
func WrapTx(tx gate.Tx) (Tx, error) {
	switch raw := tx.Raw().(type) {
	case pgx.Tx:
		return pgTx{raw}, nil
	case *sql.Tx:
		return sqlTx{raw}, nil
	}
	return nil, fmt.Errorf("tool: unsupported transaction %T", tx.Raw())
}

type pgTx struct{ tx pgx.Tx }

func (t pgTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t pgTx) QueryRow(ctx context.Context, query string, args ...any) Row {
	return pgRow{t.tx.QueryRow(ctx, query, args...)}
}

func (t pgTx) Engine() Engine { return Postgres }
func (t pgTx) Raw() any       { return t.tx }

type pgRow struct{ row pgx.Row }

func (r pgRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ErrNotFound
	}
	return err
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) QueryRow(ctx context.Context, query string, args ...any) Row {
	return sqlRow{t.tx.QueryRowContext(ctx, query, args...)}
}

func (t sqlTx) Engine() Engine { return SQLite }
func (t sqlTx) Raw() any       { return t.tx }

type sqlRow struct{ row *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return domain.ErrNotFound
	}
	return err
}
