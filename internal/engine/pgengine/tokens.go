package pgengine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/store"
)

// TokenInsert implements store.Tokens.
func (s *Store) TokenInsert(ctx context.Context, p *store.TokenInsertParams) (*store.Token, error) {
	if err := enginesql.CheckTokenInsert(p); err != nil {
		return nil, fmt.Errorf("pgengine: %w", err)
	}
	t, err := scanToken(s.pool.QueryRow(ctx, sqlTokenInsert, tokenArgs(p)...))
	return t, translate(err)
}

// TokenGetByHash implements store.Tokens.
func (s *Store) TokenGetByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return tokenGetByHash(ctx, s.pool, hash)
}

func tokenGetByHash(ctx context.Context, q querier, hash []byte) (*store.Token, error) {
	t, err := scanToken(q.QueryRow(ctx, sqlTokenGetByHash, hash))
	return t, translate(err)
}

// TokenRevoke implements store.Tokens.
func (s *Store) TokenRevoke(ctx context.Context, p *store.TokenRevokeParams) (*store.Token, error) {
	if p.ID == "" {
		return nil, errors.New("pgengine: TokenRevoke: ID is required")
	}
	t, err := scanToken(s.pool.QueryRow(ctx, sqlTokenRevoke, p.ID, p.TenantID))
	return t, translate(err)
}

// TokenList implements store.Tokens.
func (s *Store) TokenList(ctx context.Context, p *store.TokenListParams) ([]*store.Token, error) {
	if p.TenantID == "" {
		return nil, errors.New("pgengine: TokenList: TenantID is required")
	}
	out, err := list(ctx, s.pool, scanToken, sqlTokenList, p.TenantID)
	if out == nil && err == nil {
		out = []*store.Token{} // none is an empty list, not nil
	}
	return out, err
}

// Seed implements store.Seeder: one READ COMMITTED transaction that
// inserts the missing rows and leaves existing ones unchanged (see
// store.Seeder). Concurrent seeds of the same file are safe: ON CONFLICT DO
// NOTHING lets one of them create each row.
func (s *Store) Seed(ctx context.Context, f *store.SeedFile) (*store.SeedResult, error) {
	return enginesql.Seed(ctx, f, func(ctx context.Context) (enginesql.SeedTx, error) {
		tx, err := s.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return seedTx{tx.(*Tx)}, nil
	}, &seedStatements)
}

var seedStatements = enginesql.SeedStatements{
	Tenant: sqlSeedTenant,
	Token:  sqlTokenInsert, TokenFixed: sqlSeedTokenFixed,
}

// seedTx is a transaction that seeds.
type seedTx struct{ *Tx }

func (t seedTx) Insert(ctx context.Context, sql string, args ...any) (bool, error) {
	tag, err := t.tx.Exec(ctx, sql, args...)
	return tag.RowsAffected() == 1, translate(err)
}

func (seedTx) TokenArgs(p *store.TokenInsertParams) ([]any, error) { return tokenArgs(p), nil }

func (t seedTx) TokenGetByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return tokenGetByHash(ctx, t.tx, hash)
}

// tokenArgs are the parameters of sqlTokenInsert and sqlSeedTokenFixed.
func tokenArgs(p *store.TokenInsertParams) []any {
	return []any{p.ID, p.TenantID, p.UserID, nonNil(p.Scopes), p.Hash, p.ExpiresAt}
}

func scanToken(row enginesql.Row) (*store.Token, error) {
	var t store.Token
	if err := row.Scan(&t.ID, &t.TenantID, &t.UserID, &t.Scopes, &t.Hash, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt); err != nil {
		return nil, err
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.ExpiresAt = utc(t.ExpiresAt)
	t.RevokedAt = utc(t.RevokedAt)
	if t.Scopes == nil {
		t.Scopes = []string{}
	}
	return &t, nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// nonNil turns a nil slice into an empty one: pgx sends nil as NULL.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
