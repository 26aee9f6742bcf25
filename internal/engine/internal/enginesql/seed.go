package enginesql

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
)

// SeedTx is an engine's seeding transaction: a gate.Tx, which
// store.SeedFile.Rows joins.
type SeedTx interface {
	core.Tx
	// Insert runs an insert that does nothing on conflict and reports
	// whether it created the row. Its error is translated.
	Insert(ctx context.Context, query string, args ...any) (created bool, err error)
	// TokenArgs are the engine's parameters of a token insert: id, tenant,
	// user, scopes, hash, expires_at.
	TokenArgs(p *store.TokenInsertParams) ([]any, error)
	// TokenGetByHash is store.Tokens.TokenGetByHash in the transaction.
	TokenGetByHash(ctx context.Context, hash []byte) (*store.Token, error)
	// ListArg is the engine's parameter of a list of strings, NULL when
	// it is empty (tenant_settings.approval_mail_to).
	ListArg(v []string) (any, error)
}

// SeedStatements are an engine's seeding statements. Each inserts one row
// unless it exists (by primary key; a fixed token by hash), with the
// parameters in the seed entry's field order.
type SeedStatements struct {
	// Tenant takes the tenant, reset_link_base and approval_mail_to
	// (SeedTx.ListArg).
	Tenant string
	// Token inserts a minted token, TokenFixed a fixed value unless a
	// token has its hash; both take SeedTx.TokenArgs.
	Token, TokenFixed string
}

// seedRow is one insert of Seed.
type seedRow struct {
	entry string
	count *store.SeedCount
	query string
	args  []any
}

// Seed is store.Seeder.Seed: it validates f, then loads it in one
// transaction from begin. Errors of an entry name it, as in "orders[0]: …".
func Seed(ctx context.Context, f *store.SeedFile, begin func(context.Context) (SeedTx, error), stmts *SeedStatements) (*store.SeedResult, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if f.HasRows() && f.Rows == nil {
		return nil, errors.New("seed: approval thresholds are the tools' rows; " +
			"set SeedFile.Rows (tools.Seed) to load them")
	}
	tx, err := begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := seed(ctx, f, tx, stmts)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

func seed(ctx context.Context, f *store.SeedFile, tx SeedTx, stmts *SeedStatements) (*store.SeedResult, error) {
	res := &store.SeedResult{CreatedTokens: []store.SeedCreatedToken{}}
	if f.Rows != nil {
		if err := f.Rows.Load(ctx, tx, f.Tenants, res); err != nil {
			return nil, err
		}
	}
	rows, err := seedRows(f, res, tx, stmts)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		created, err := tx.Insert(ctx, r.query, r.args...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.entry, err)
		}
		if created {
			r.count.Created++
		} else {
			r.count.Existing++
		}
	}
	for i := range f.Tokens {
		if err := seedToken(ctx, tx, stmts, i, &f.Tokens[i], res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// seedRows are the inserts of f's tenants, in file order, each counted in
// res.
func seedRows(f *store.SeedFile, res *store.SeedResult, tx SeedTx, stmts *SeedStatements) ([]seedRow, error) {
	var rows []seedRow
	add := func(entry string, count *store.SeedCount, query string, args ...any) {
		rows = append(rows, seedRow{entry: entry, count: count, query: query, args: args})
	}
	for i, tn := range f.Tenants {
		entry := fmt.Sprintf("tenants[%d]", i)
		var base any // NULL: the deployment's
		if tn.ResetLinkBase != "" {
			base = tn.ResetLinkBase
		}
		mailTo, err := tx.ListArg(tn.ApprovalMailTo) // NULL: nobody
		if err != nil {
			return nil, fmt.Errorf("%s.approval_mail_to: %w", entry, err)
		}
		add(entry, &res.Tenants, stmts.Tenant, tn.Tenant, base, mailTo)
	}
	return rows, nil
}

// seedToken loads f.Tokens[i]: a fixed value by hash if absent, otherwise a
// freshly minted token whose secret goes into res.CreatedTokens.
func seedToken(ctx context.Context, tx SeedTx, stmts *SeedStatements, i int, t *store.SeedToken, res *store.SeedResult) error {
	entry := fmt.Sprintf("tokens[%d]", i)
	secret, id, err := tenancy.NewToken()
	if err != nil {
		return fmt.Errorf("%s: %w", entry, err)
	}
	p := &store.TokenInsertParams{ID: id, TenantID: t.Tenant, UserID: t.User, Scopes: t.Scopes, ExpiresAt: t.ExpiresAt}
	if t.Token == "" {
		p.Hash = tenancy.HashToken(secret)
		if err := insertToken(ctx, tx, stmts.Token, p); err != nil {
			return fmt.Errorf("%s: %w", entry, err)
		}
		res.Tokens.Created++
		res.CreatedTokens = append(res.CreatedTokens, store.SeedCreatedToken{
			Index: i, ID: id, TenantID: t.Tenant, UserID: t.User, Scopes: slices.Clone(t.Scopes), Token: secret,
		})
		return nil
	}
	p.Hash = tenancy.HashToken(t.Token)
	if err := insertToken(ctx, tx, stmts.TokenFixed, p); errors.Is(err, errTokenExists) {
		return sameFixedToken(ctx, tx, entry, t, p.Hash, res)
	} else if err != nil {
		return fmt.Errorf("%s: %w", entry, err)
	}
	res.Tokens.Created++
	return nil
}

// errTokenExists is insertToken's answer when the insert created no row.
var errTokenExists = errors.New("token exists")

func insertToken(ctx context.Context, tx SeedTx, query string, p *store.TokenInsertParams) error {
	args, err := tx.TokenArgs(p)
	if err != nil {
		return err
	}
	created, err := tx.Insert(ctx, query, args...)
	if err == nil && !created {
		return errTokenExists
	}
	return err
}

// sameFixedToken counts a fixed token value that exists as existing if it
// is the same tenant's, user's and scopes', and refuses it otherwise.
func sameFixedToken(ctx context.Context, tx SeedTx, entry string, t *store.SeedToken, hash []byte, res *store.SeedResult) error {
	existing, err := tx.TokenGetByHash(ctx, hash)
	if err != nil {
		return fmt.Errorf("%s: %w", entry, err)
	}
	if existing.TenantID != t.Tenant || existing.UserID != t.User || !sameSet(existing.Scopes, t.Scopes) {
		return fmt.Errorf("%s.token: this value is already token %s of tenant %q, user %q, scopes %v; "+
			"a fixed value cannot be reissued to another tenant, user or scope set",
			entry, existing.ID, existing.TenantID, existing.UserID, existing.Scopes)
	}
	res.Tokens.Existing++
	return nil
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// CheckTokenInsert checks the parameters of store.Tokens.TokenInsert.
func CheckTokenInsert(p *store.TokenInsertParams) error {
	switch {
	case p.ID == "":
		return errors.New("TokenInsert: ID is required")
	case p.TenantID == "":
		return errors.New("TokenInsert: TenantID is required")
	case p.UserID == "":
		return errors.New("TokenInsert: UserID is required")
	case len(p.Hash) != sha256.Size:
		return fmt.Errorf("TokenInsert: Hash must be %d bytes (tenancy.HashToken), got %d", sha256.Size, len(p.Hash))
	}
	return nil
}
