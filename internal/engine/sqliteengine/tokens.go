package sqliteengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/store"
)

// TokenInsert implements store.Tokens.
func (s *Store) TokenInsert(ctx context.Context, p *store.TokenInsertParams) (*store.Token, error) {
	if err := enginesql.CheckTokenInsert(p); err != nil {
		return nil, fmt.Errorf("sqliteengine: %w", err)
	}
	args, err := tokenArgs(p)
	if err != nil {
		return nil, err
	}
	t, err := scanToken(s.db.QueryRowContext(ctx, sqlTokenInsert, args...))
	return t, translate(err)
}

// TokenGetByHash implements store.Tokens.
func (s *Store) TokenGetByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return tokenGetByHash(ctx, s.db, hash)
}

func tokenGetByHash(ctx context.Context, q querier, hash []byte) (*store.Token, error) {
	t, err := scanToken(q.QueryRowContext(ctx, sqlTokenGetByHash, hash))
	return t, translate(err)
}

// TokenRevoke implements store.Tokens.
func (s *Store) TokenRevoke(ctx context.Context, p *store.TokenRevokeParams) (*store.Token, error) {
	if p.ID == "" {
		return nil, errors.New("sqliteengine: TokenRevoke: ID is required")
	}
	t, err := scanToken(s.db.QueryRowContext(ctx, sqlTokenRevoke, p.ID, p.TenantID))
	return t, translate(err)
}

// TokenList implements store.Tokens.
func (s *Store) TokenList(ctx context.Context, p *store.TokenListParams) ([]*store.Token, error) {
	if p.TenantID == "" {
		return nil, errors.New("sqliteengine: TokenList: TenantID is required")
	}
	rows, err := s.db.QueryContext(ctx, sqlTokenList, p.TenantID)
	out, err := list(rows, err, scanToken)
	if out == nil && err == nil {
		out = []*store.Token{} // none is an empty list, not nil
	}
	return out, err
}

// Seed implements store.Seeder: one transaction (BEGIN IMMEDIATE, so the
// only writer) that inserts the missing rows and leaves existing ones
// unchanged (see store.Seeder).
func (s *Store) Seed(ctx context.Context, f *store.SeedFile) (*store.SeedResult, error) {
	return enginesql.Seed(ctx, f, func(ctx context.Context) (enginesql.SeedTx, error) {
		tx, err := s.begin(ctx)
		if err != nil {
			return nil, err
		}
		return seedTx{tx}, nil
	}, &seedStatements)
}

var seedStatements = enginesql.SeedStatements{
	Tenant: sqlSeedTenant,
	Token:  sqlTokenInsert, TokenFixed: sqlSeedTokenFixed,
}

// seedTx is a transaction that seeds.
type seedTx struct{ *Tx }

func (t seedTx) Insert(ctx context.Context, query string, args ...any) (bool, error) {
	r, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return false, translate(err)
	}
	n, err := r.RowsAffected()
	return n == 1, translate(err)
}

func (seedTx) TokenArgs(p *store.TokenInsertParams) ([]any, error) { return tokenArgs(p) }

func (t seedTx) TokenGetByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return tokenGetByHash(ctx, t.tx, hash)
}

// tokenArgs are the parameters of sqlTokenInsert and sqlSeedTokenFixed:
// scopes as a JSON array (nil is []), expires_at as stored text or NULL.
func tokenArgs(p *store.TokenInsertParams) ([]any, error) {
	scopes := p.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	b, err := json.Marshal(scopes)
	if err != nil {
		return nil, err
	}
	return []any{p.ID, p.TenantID, p.UserID, string(b), p.Hash, nullTime(p.ExpiresAt)}, nil
}

func scanToken(row enginesql.Row) (*store.Token, error) {
	var (
		t      store.Token
		scopes string
	)
	if err := row.Scan(&t.ID, &t.TenantID, &t.UserID, &scopes, &t.Hash,
		times{}.Time(&t.CreatedAt), times{}.NullTime(&t.ExpiresAt), times{}.NullTime(&t.RevokedAt)); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(scopes), &t.Scopes); err != nil {
		return nil, fmt.Errorf("sqliteengine: token %s scopes: %w", t.ID, err)
	}
	if t.Scopes == nil {
		t.Scopes = []string{}
	}
	return &t, nil
}

// times scans stored TimeFormat text into times.
type times struct{}

func (times) Time(dst *time.Time) any { return textTime{dst} }

func (times) NullTime(dst **time.Time) any { return nullTextTime{dst} }
