package sqlitestore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/tenancy"
)

// TokenInsert implements store.Tokens.
func (s *Store) TokenInsert(ctx context.Context, p *store.TokenInsertParams) (*store.Token, error) {
	if err := checkInsert(p); err != nil {
		return nil, err
	}
	scopes, err := scopesJSON(p.Scopes)
	if err != nil {
		return nil, err
	}
	t, err := scanToken(s.db.QueryRowContext(ctx, sqlTokenInsert,
		p.ID, p.TenantID, p.UserID, scopes, p.Hash, nullTime(p.ExpiresAt)))
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
		return nil, errors.New("sqlitestore: TokenRevoke: ID is required")
	}
	t, err := scanToken(s.db.QueryRowContext(ctx, sqlTokenRevoke, p.ID, p.TenantID))
	return t, translate(err)
}

// TokenList implements store.Tokens.
func (s *Store) TokenList(ctx context.Context, p *store.TokenListParams) ([]*store.Token, error) {
	if p.TenantID == "" {
		return nil, errors.New("sqlitestore: TokenList: TenantID is required")
	}
	rows, err := s.db.QueryContext(ctx, sqlTokenList, p.TenantID)
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
	var (
		o         store.Order
		createdAt string
	)
	err := s.db.QueryRowContext(ctx, sqlOrderGet, p.TenantID, p.OrderID).Scan(
		&o.TenantID, &o.OrderID, &o.ChargeID, &o.AmountCents, &o.RefundedCents, &o.Currency, &createdAt)
	if err != nil {
		return nil, translate(err)
	}
	if o.CreatedAt, err = ParseTime(createdAt); err != nil {
		return nil, err
	}
	return &o, nil
}

// Seed implements store.Seeder: one transaction (BEGIN IMMEDIATE, so the
// only writer) that inserts the missing rows and leaves existing ones
// unchanged (see store.Seeder).
func (s *Store) Seed(ctx context.Context, f *store.SeedFile) (*store.SeedResult, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, translate(err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit

	res := &store.SeedResult{CreatedTokens: []store.SeedCreatedToken{}}
	exec := func(entry string, count *store.SeedCount, query string, args ...any) error {
		r, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", entry, translate(err))
		}
		n, err := r.RowsAffected()
		if err != nil {
			return fmt.Errorf("%s: %w", entry, translate(err))
		}
		if n == 1 {
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
		var userID any
		if st.UserID != "" {
			userID = st.UserID
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
	if err := tx.Commit(); err != nil {
		return nil, translate(err)
	}
	return res, nil
}

// seedToken loads f.Tokens[i]: a fixed value by hash if absent, otherwise a
// freshly minted token whose secret goes into res.CreatedTokens.
func seedToken(ctx context.Context, tx *sql.Tx, i int, t *store.SeedToken, res *store.SeedResult) error {
	entry := fmt.Sprintf("tokens[%d]", i)
	secret, id, err := tenancy.NewToken()
	if err != nil {
		return fmt.Errorf("%s: %w", entry, err)
	}
	scopes, err := scopesJSON(t.Scopes)
	if err != nil {
		return fmt.Errorf("%s: %w", entry, err)
	}
	if t.Token == "" {
		if _, err := tx.ExecContext(ctx, sqlTokenInsert, id, t.Tenant, t.User, scopes, tenancy.HashToken(secret), nullTime(t.ExpiresAt)); err != nil {
			return fmt.Errorf("%s: %w", entry, translate(err))
		}
		res.Tokens.Created++
		res.CreatedTokens = append(res.CreatedTokens, store.SeedCreatedToken{
			Index: i, ID: id, TenantID: t.Tenant, UserID: t.User, Scopes: slices.Clone(t.Scopes), Token: secret,
		})
		return nil
	}

	hash := tenancy.HashToken(t.Token)
	r, err := tx.ExecContext(ctx, sqlSeedTokenFixed, id, t.Tenant, t.User, scopes, hash, nullTime(t.ExpiresAt))
	if err != nil {
		return fmt.Errorf("%s: %w", entry, translate(err))
	}
	if n, err := r.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", entry, translate(err))
	} else if n == 1 {
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
		return errors.New("sqlitestore: TokenInsert: ID is required")
	case p.TenantID == "":
		return errors.New("sqlitestore: TokenInsert: TenantID is required")
	case p.UserID == "":
		return errors.New("sqlitestore: TokenInsert: UserID is required")
	case len(p.Hash) != sha256.Size:
		return fmt.Errorf("sqlitestore: TokenInsert: Hash must be %d bytes (tenancy.HashToken), got %d", sha256.Size, len(p.Hash))
	}
	return nil
}

func scanToken(row scanner) (*store.Token, error) {
	var (
		t                    store.Token
		scopes, createdAt    string
		expiresAt, revokedAt sql.NullString
	)
	if err := row.Scan(&t.ID, &t.TenantID, &t.UserID, &scopes, &t.Hash, &createdAt, &expiresAt, &revokedAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(scopes), &t.Scopes); err != nil {
		return nil, fmt.Errorf("sqlitestore: token %s scopes: %w", t.ID, err)
	}
	if t.Scopes == nil {
		t.Scopes = []string{}
	}
	var err error
	if t.CreatedAt, err = ParseTime(createdAt); err != nil {
		return nil, err
	}
	if t.ExpiresAt, err = ParseNullTime(expiresAt); err != nil {
		return nil, err
	}
	if t.RevokedAt, err = ParseNullTime(revokedAt); err != nil {
		return nil, err
	}
	return &t, nil
}

// scopesJSON encodes scopes as the JSON array stored; nil is [].
func scopesJSON(scopes []string) (string, error) {
	if scopes == nil {
		scopes = []string{}
	}
	b, err := json.Marshal(scopes)
	return string(b), err
}

// nullTime passes a time as stored text, and nil as NULL.
func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return FormatTime(*t)
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
