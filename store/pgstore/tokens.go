package pgstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/tenancy"
)

// TokenInsert implements store.Tokens.
func (s *Store) TokenInsert(ctx context.Context, p *store.TokenInsertParams) (*store.Token, error) {
	if err := checkInsert(p); err != nil {
		return nil, err
	}
	t, err := scanToken(s.pool.QueryRow(ctx, sqlTokenInsert,
		p.ID, p.TenantID, p.UserID, nonNil(p.Scopes), p.Hash, p.ExpiresAt))
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
		return nil, errors.New("pgstore: TokenRevoke: ID is required")
	}
	t, err := scanToken(s.pool.QueryRow(ctx, sqlTokenRevoke, p.ID, p.TenantID))
	return t, translate(err)
}

// TokenList implements store.Tokens.
func (s *Store) TokenList(ctx context.Context, p *store.TokenListParams) ([]*store.Token, error) {
	if p.TenantID == "" {
		return nil, errors.New("pgstore: TokenList: TenantID is required")
	}
	rows, err := s.pool.Query(ctx, sqlTokenList, p.TenantID)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := []*store.Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, t)
	}
	return out, translate(rows.Err())
}

// OrderGet implements store.Orders.
func (s *Store) OrderGet(ctx context.Context, p *store.OrderGetParams) (*store.Order, error) {
	var o store.Order
	err := s.pool.QueryRow(ctx, sqlOrderGet, p.TenantID, p.OrderID).Scan(
		&o.TenantID, &o.OrderID, &o.ChargeID, &o.AmountCents, &o.RefundedCents, &o.Currency, &o.CreatedAt)
	if err != nil {
		return nil, translate(err)
	}
	o.CreatedAt = o.CreatedAt.UTC()
	return &o, nil
}

// Seed implements store.Seeder: one READ COMMITTED transaction that
// inserts the missing rows and leaves existing ones unchanged (see
// store.Seeder). Concurrent seeds of the same file are safe: ON CONFLICT DO
// NOTHING lets one of them create each row.
func (s *Store) Seed(ctx context.Context, f *store.SeedFile) (*store.SeedResult, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, translate(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit

	res := &store.SeedResult{CreatedTokens: []store.SeedCreatedToken{}}
	exec := func(entry string, count *store.SeedCount, sql string, args ...any) error {
		tag, err := tx.Exec(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", entry, translate(err))
		}
		if tag.RowsAffected() == 1 {
			count.Created++
		} else {
			count.Existing++
		}
		return nil
	}
	for i, o := range f.Orders {
		if err := exec(fmt.Sprintf("orders[%d]", i), &res.Orders, sqlSeedOrder,
			o.Tenant, o.OrderID, o.ChargeID, o.AmountCents, o.Currency); err != nil {
			return nil, err
		}
	}
	for i, c := range f.Customers {
		if err := exec(fmt.Sprintf("customers[%d]", i), &res.Customers, sqlSeedCustomer,
			c.Tenant, c.CustomerID, c.Currency); err != nil {
			return nil, err
		}
	}
	for i, st := range f.Seats {
		var userID *string
		if st.UserID != "" {
			userID = &st.UserID
		}
		if err := exec(fmt.Sprintf("seats[%d]", i), &res.Seats, sqlSeedSeat,
			st.Tenant, st.SeatID, userID); err != nil {
			return nil, err
		}
	}
	for i, u := range f.Users {
		if err := exec(fmt.Sprintf("users[%d]", i), &res.Users, sqlSeedUser,
			u.Tenant, u.UserID, u.Email); err != nil {
			return nil, err
		}
	}
	for i, t := range f.Tokens {
		if err := seedToken(ctx, tx, i, &t, res); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, translate(err)
	}
	return res, nil
}

// seedToken loads f.Tokens[i]: a fixed value by hash if absent, otherwise a
// freshly minted token whose secret goes into res.CreatedTokens.
func seedToken(ctx context.Context, tx pgx.Tx, i int, t *store.SeedToken, res *store.SeedResult) error {
	entry := fmt.Sprintf("tokens[%d]", i)
	secret, id, err := tenancy.NewToken()
	if err != nil {
		return fmt.Errorf("%s: %w", entry, err)
	}
	if t.Token == "" {
		if _, err := tx.Exec(ctx, sqlTokenInsert, id, t.Tenant, t.User, t.Scopes, tenancy.HashToken(secret), t.ExpiresAt); err != nil {
			return fmt.Errorf("%s: %w", entry, translate(err))
		}
		res.Tokens.Created++
		res.CreatedTokens = append(res.CreatedTokens, store.SeedCreatedToken{
			Index: i, ID: id, TenantID: t.Tenant, UserID: t.User, Scopes: slices.Clone(t.Scopes), Token: secret,
		})
		return nil
	}

	hash := tenancy.HashToken(t.Token)
	tag, err := tx.Exec(ctx, sqlSeedTokenFixed, id, t.Tenant, t.User, t.Scopes, hash, t.ExpiresAt)
	if err != nil {
		return fmt.Errorf("%s: %w", entry, translate(err))
	}
	if tag.RowsAffected() == 1 {
		res.Tokens.Created++
		return nil
	}
	existing, err := tokenGetByHash(ctx, tx, hash)
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

func checkInsert(p *store.TokenInsertParams) error {
	switch {
	case p.ID == "":
		return errors.New("pgstore: TokenInsert: ID is required")
	case p.TenantID == "":
		return errors.New("pgstore: TokenInsert: TenantID is required")
	case p.UserID == "":
		return errors.New("pgstore: TokenInsert: UserID is required")
	case len(p.Hash) != sha256.Size:
		return fmt.Errorf("pgstore: TokenInsert: Hash must be %d bytes (tenancy.HashToken), got %d", sha256.Size, len(p.Hash))
	}
	return nil
}

func scanToken(row pgx.Row) (*store.Token, error) {
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

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
