package main

import (
	"context"
	"embed"
	"errors"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// GrantLicenseArgs are grant_license's arguments; idemgate adds
// idempotency_key.
type GrantLicenseArgs struct {
	CustomerID string `json:"customer_id" jsonschema:"The customer who gets the license." idem:"id"`
	Plan       string `json:"plan" jsonschema:"The plan: team or enterprise." idem:"enum=team|enterprise"`
	Seats      int64  `json:"seats" jsonschema:"Seats, 1 to 10000." idem:"min=1,max=10000"`
}

// License is grant_license's result and get_license's answer.
type License struct {
	LicenseID  string `json:"license_id"`
	CustomerID string `json:"customer_id"`
	Plan       string `json:"plan"`
	Seats      int64  `json:"seats"`
}

// GrantLicense grants one license per intent, in the transaction that
// completes the operation: a retry, a duplicate job or a killed worker can
// never grant a second. On Postgres the team's sqlc-shaped queries run on
// the engine's own transaction (gate.EngineTx[pgx.Tx]); on SQLite the same
// statement runs through gate.Tx's Exec, on the same transaction.
var GrantLicense = &gate.Mutation[GrantLicenseArgs, License]{
	Name:        "grant_license",
	Title:       "Grant a license",
	Description: "Grant a customer a license for a plan and a number of seats, exactly once per idempotency_key.",
	Scope:       "licenses:grant",
	Policy:      gate.Policy{AuditFields: []string{"customer_id", "plan", "seats"}},
	InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[GrantLicenseArgs]) (*License, error) {
		l := &License{LicenseID: "lic_" + op.OperationID, CustomerID: op.Args.CustomerID, Plan: op.Args.Plan, Seats: op.Args.Seats}
		p := InsertLicenseParams{LicenseID: l.LicenseID, TenantID: op.TenantID, OperationID: op.OperationID,
			CustomerID: l.CustomerID, Plan: l.Plan, Seats: int32(l.Seats)} // at most 10000
		var err error
		if ptx, ok := gate.EngineTx[pgx.Tx](tx); ok {
			// Never Commit or Rollback ptx: the gate ends it.
			err = New(ptx).InsertLicense(ctx, p)
		} else {
			_, err = tx.Exec(ctx, insertLicense, p.LicenseID, p.TenantID, p.OperationID, p.CustomerID, p.Plan, p.Seats)
		}
		if err != nil {
			return nil, err
		}
		return l, nil
	},
}

// GetLicenseArgs are get_license's arguments.
type GetLicenseArgs struct {
	LicenseID string `json:"license_id" jsonschema:"The license, as grant_license answered it." idem:"id"`
}

// GetLicense reads one of the caller's tenant's licenses through the
// read-only transaction idemgate gives a read: no second pool.
var GetLicense = &gate.Read[GetLicenseArgs, License]{
	Name:        "get_license",
	Title:       "Get a license",
	Description: "A license of the caller's tenant.",
	Scope:       "licenses:read",
	Handle: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *GetLicenseArgs) (*License, error) {
		l := &License{LicenseID: a.LicenseID}
		err := tx.QueryRow(ctx, `SELECT customer_id, plan, seats FROM licenses WHERE tenant_id = $1 AND license_id = $2`,
			caller.TenantID, a.LicenseID).Scan(&l.CustomerID, &l.Plan, &l.Seats)
		if errors.Is(err, gate.ErrNotFound) {
			return nil, gate.NotFound("license_id", "no license %s", a.LicenseID)
		}
		return l, err
	},
}

// ProvisionWorkspaceArgs are provision_workspace's arguments.
type ProvisionWorkspaceArgs struct {
	Name string `json:"name" jsonschema:"The workspace's name: lowercase letters, digits and dashes, 3 to 40." idem:"minlen=3,maxlen=40,pattern=^[a-z0-9-]+$"`
}

// Workspace is provision_workspace's result.
type Workspace struct {
	WorkspaceID string `json:"workspace_id"`
	Name        string `json:"name"`
}

// ProvisionWorkspace creates a workspace in the team's provisioning API, an
// external effect: the call runs under a lease outside any transaction and
// passes op.DownstreamKey as the API's Idempotency-Key, so a worker killed
// after the call and reclaimed calls again with the same key and the API
// answers the workspace it made. Record keeps a copy in the team's table.
func ProvisionWorkspace(api *WorkspaceClient) *gate.Mutation[ProvisionWorkspaceArgs, Workspace] {
	return &gate.Mutation[ProvisionWorkspaceArgs, Workspace]{
		Name:        "provision_workspace",
		Title:       "Provision a workspace",
		Description: "Create a workspace in the provisioning API, exactly once per idempotency_key.",
		Scope:       "workspaces:provision",
		Provider:    "workspaces",
		Policy:      gate.Policy{AuditFields: []string{"name"}},
		Call: func(ctx context.Context, op *gate.Op[ProvisionWorkspaceArgs]) (*Workspace, error) {
			w, err := api.Create(ctx, op.DownstreamKey, op.TenantID, op.Args.Name, op.OperationID)
			var refused *RefusedError
			switch {
			case errors.As(err, &refused):
				// The API answered 4xx: it made nothing.
				return nil, gate.NothingHappened(domain.CodeInvalidArgument, "the provisioning API refused: %s", refused.Message)
			case err != nil:
				// A timeout or a 5xx: retried with the same key.
				return nil, gate.Transient("workspaces_unavailable", err)
			}
			return w, nil
		},
		Record: func(ctx context.Context, tx gate.Tx, op *gate.Op[ProvisionWorkspaceArgs], w *Workspace) error {
			_, err := tx.Exec(ctx, `INSERT INTO workspaces (workspace_id, tenant_id, operation_id, name) VALUES ($1, $2, $3, $4)`,
				w.WorkspaceID, op.TenantID, op.OperationID, w.Name)
			return err
		},
	}
}

//go:embed migrations
var migrationFiles embed.FS

// Migrations returns the team's own goose migrations for one engine
// (gate.Postgres or gate.SQLite). Stack.Migrate applies them with the
// team's goose, in goose's default version table; the tests hand them to
// gatetest (Options.Migrations), which applies them on its own databases.
func Migrations(engine string) fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations/"+engine)
	if err != nil {
		panic(err) // the directories are embedded
	}
	return sub
}
