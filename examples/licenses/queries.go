package main

// The team's Postgres queries, in the shape sqlc generates for pgx/v5
// (sql_package: pgx/v5, with uuid columns overridden to string) from
// annotated SQL; written by hand here so that the example needs no
// generator. New takes a pool, a connection or a pgx.Tx: GrantLicense
// passes the gate's transaction (gate.EngineTx[pgx.Tx]), the usage report
// the team's pool.

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the queries run on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}

// New returns the queries on db.
func New(db DBTX) *Queries {
	return &Queries{db: db}
}

// Queries are the team's queries on one DBTX.
type Queries struct {
	db DBTX
}

// WithTx returns the queries on tx.
func (q *Queries) WithTx(tx pgx.Tx) *Queries {
	return &Queries{db: tx}
}

const insertLicense = `-- name: InsertLicense :exec
INSERT INTO licenses (license_id, tenant_id, operation_id, customer_id, plan, seats)
VALUES ($1, $2, $3, $4, $5, $6)
`

// InsertLicenseParams are InsertLicense's parameters.
type InsertLicenseParams struct {
	LicenseID   string
	TenantID    string
	OperationID string
	CustomerID  string
	Plan        string
	Seats       int32
}

// InsertLicense inserts one license.
func (q *Queries) InsertLicense(ctx context.Context, arg InsertLicenseParams) error {
	_, err := q.db.Exec(ctx, insertLicense,
		arg.LicenseID,
		arg.TenantID,
		arg.OperationID,
		arg.CustomerID,
		arg.Plan,
		arg.Seats,
	)
	return err
}

const countLicensesByTenant = `-- name: CountLicensesByTenant :many
SELECT tenant_id, count(*) AS licenses, coalesce(sum(seats), 0)::bigint AS seats
FROM licenses
GROUP BY tenant_id
ORDER BY tenant_id
`

// CountLicensesByTenantRow is one row of CountLicensesByTenant.
type CountLicensesByTenantRow struct {
	TenantID string
	Licenses int64
	Seats    int64
}

// CountLicensesByTenant counts every tenant's licenses and seats.
func (q *Queries) CountLicensesByTenant(ctx context.Context) ([]CountLicensesByTenantRow, error) {
	rows, err := q.db.Query(ctx, countLicensesByTenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []CountLicensesByTenantRow
	for rows.Next() {
		var i CountLicensesByTenantRow
		if err := rows.Scan(&i.TenantID, &i.Licenses, &i.Seats); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}
