package toolspec

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/gate"
)

// WrapTx adapts a gate store transaction to Tx.
func WrapTx(tx gate.Tx) (Tx, error) {
	switch raw := tx.Raw().(type) {
	case pgx.Tx:
		return pgTx{raw}, nil
	case *sql.Tx:
		return sqlTx{raw}, nil
	}
	return nil, fmt.Errorf("toolspec: unsupported transaction %T", tx.Raw())
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

func (t pgTx) Engine() string { return "postgres" }
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

func (t sqlTx) Engine() string { return "sqlite" }
func (t sqlTx) Raw() any       { return t.tx }

type sqlRow struct{ row *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return domain.ErrNotFound
	}
	return err
}
