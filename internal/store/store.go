// Package store declares what idemgate keeps outside the gate (bearer
// tokens, seed data) as small engine-agnostic
// interfaces and row types. Each engine implements them in a subpackage:
// engine/pgengine for Postgres and engine/sqliteengine for SQLite.
//
// Stores translate their engine's errors at the boundary: a missing row is
// vocab.ErrNotFound, a duplicate is vocab.ErrAlreadyExists, and a database
// that cannot be reached wraps vocab.ErrUnavailable. Callers use errors.Is.
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Token is one row of api_tokens. The secret is never stored; Hash is its
// SHA-256 (see tenancy.HashToken).
type Token struct {
	// ID names the token in audit rows and in idemctl ("tok_" + 16 hex).
	ID       string
	TenantID string
	UserID   string
	Scopes   []string
	// Hash is the SHA-256 of the secret. It is not secret itself, but it is
	// never printed: whoever renders a Token picks its fields.
	Hash      []byte `json:"-"`
	CreatedAt time.Time
	// ExpiresAt is nil for a token that does not expire.
	ExpiresAt *time.Time
	// RevokedAt is nil until the token is revoked.
	RevokedAt *time.Time
}

// TokenInsertParams are the arguments of Tokens.TokenInsert.
type TokenInsertParams struct {
	// ID is the new token's id; tenancy.NewToken makes one.
	ID       string
	TenantID string
	UserID   string
	Scopes   []string
	// Hash is tenancy.HashToken(secret).
	Hash []byte
	// ExpiresAt is optional; nil means the token does not expire.
	ExpiresAt *time.Time
}

// TokenRevokeParams are the arguments of Tokens.TokenRevoke.
type TokenRevokeParams struct {
	ID string
	// TenantID is optional: when set, only a token of this tenant is
	// revoked, and another tenant's token is vocab.ErrNotFound.
	TenantID string
}

// TokenListParams are the arguments of Tokens.TokenList.
type TokenListParams struct {
	// TenantID is required.
	TenantID string
}

// Tokens stores bearer tokens.
type Tokens interface {
	// TokenInsert inserts a token. A token with the same hash (or id) is
	// vocab.ErrAlreadyExists.
	TokenInsert(ctx context.Context, p *TokenInsertParams) (*Token, error)
	// TokenGetByHash returns the token whose hash is hash, revoked and
	// expired ones included (the caller decides), or vocab.ErrNotFound.
	TokenGetByHash(ctx context.Context, hash []byte) (*Token, error)
	// TokenRevoke sets RevokedAt and returns the token. Revoking a revoked
	// token changes nothing and returns it with its first RevokedAt. An
	// unknown id (or one of another tenant than p.TenantID) is
	// vocab.ErrNotFound.
	TokenRevoke(ctx context.Context, p *TokenRevokeParams) (*Token, error)
	// TokenList returns a tenant's tokens, revoked and expired ones
	// included, oldest first.
	TokenList(ctx context.Context, p *TokenListParams) ([]*Token, error)
}

// ResetTokenRedemption is a password-reset token that
// ResetTokens.ResetTokenRedeem consumed: whose reset it is.
type ResetTokenRedemption struct {
	TenantID, UserID, OperationID string
	// UsedAt is when it was consumed, by the database's clock.
	UsedAt time.Time
}

// ResetTokens consumes password-reset tokens (POST
// /v1/password-resets/redeem). The built-in tools implement it
// (tools.ResetTokens), beside send_password_reset, which stores them.
type ResetTokens interface {
	// ResetTokenRedeem consumes the token whose hash is tokenHash, at most
	// once: one conditional update sets used_at if it is unset and the
	// token unexpired. Otherwise the error is vocab.ErrAlreadyUsed (used
	// before, expired or not), vocab.ErrExpired, or vocab.ErrNotFound
	// (no such token).
	ResetTokenRedeem(ctx context.Context, tokenHash []byte) (*ResetTokenRedemption, error)
}

// TenantSettings reads a tenant's own settings (tenant_settings), which
// the seed file's "tenants" entries write.
type TenantSettings interface {
	// TenantApprovalMailTo returns the addresses the tenant's approval
	// notices are mailed to, as seeded; nil (and no error) when it has
	// none.
	TenantApprovalMailTo(ctx context.Context, tenantID string) ([]string, error)
}

// ApprovalNotices gathers a tenant's approval notices: at most one per
// period, listing every operation that began waiting since the last.
type ApprovalNotices interface {
	// ApprovalNoticeReserve decides, under the tenant's notice lock, what
	// the notice job of OperationID does, and records it:
	//   - OperationID was listed by another operation's notice: Gathered.
	//   - OperationID leads a notice reserved before (a retried job): that
	//     notice's operations again, to send with the same Message-ID.
	//   - The tenant's last notice is less than Period old: Due, when the
	//     next may go (nothing recorded).
	//   - Otherwise: every operation of the tenant awaiting approval
	//     (window open at Now) that no notice listed yet, oldest first,
	//     recorded as listed by OperationID's notice at Now.
	ApprovalNoticeReserve(ctx context.Context, p *ApprovalNoticeReserveParams) (*ApprovalNoticeBatch, error)
}

// ApprovalNoticeReserveParams are the parameters of
// ApprovalNotices.ApprovalNoticeReserve.
type ApprovalNoticeReserveParams struct {
	TenantID    string
	OperationID string
	// Period is the least time between two notices of the tenant.
	Period time.Duration
	// Now is the clock reading of the decision.
	Now time.Time
}

// ApprovalNoticeBatch is ApprovalNoticeReserve's decision.
type ApprovalNoticeBatch struct {
	// Gathered: another operation's notice lists this one.
	Gathered bool
	// Due, when set, is when the tenant's next notice may go.
	Due time.Time
	// OperationIDs are the operations the notice lists, oldest first.
	OperationIDs []string
}

// Seeder loads a seed file.
type Seeder interface {
	// Seed validates f (SeedFile.Validate) and loads it in one transaction.
	// It is idempotent: rows that exist (by primary key; tokens with a
	// fixed value by hash) are left exactly as they are, even where the file
	// says otherwise, and counted as existing. Tokens without a fixed value
	// are minted on every call and returned in SeedResult.CreatedTokens. A
	// fixed token value that already belongs to another tenant, user or
	// scope set is an error naming the entry, and nothing is loaded.
	Seed(ctx context.Context, f *SeedFile) (*SeedResult, error)
}

// SeedResult summarizes what Seed did. It is what `idemctl seed` prints:
// one member per section of rows, then "tokens", "tenants" and
// "created_tokens".
type SeedResult struct {
	// Rows count the tools' rows (SeedFile.Rows) per section, in the order
	// Count first named them.
	Rows    []SeedSectionCount `json:"-"`
	Tokens  SeedCount          `json:"tokens"`
	Tenants SeedCount          `json:"tenants"`
	// CreatedTokens holds the secrets of the tokens minted for entries
	// without a fixed value, in file order; never nil. Fixed values are not
	// repeated here.
	CreatedTokens []SeedCreatedToken `json:"created_tokens"`
}

// SeedSectionCount counts the rows of one of a seed file's tools'
// sections.
type SeedSectionCount struct {
	Section string
	SeedCount
}

// Count is the count of section's rows, added (zero) if r has none yet.
func (r *SeedResult) Count(section string) *SeedCount {
	for i := range r.Rows {
		if r.Rows[i].Section == section {
			return &r.Rows[i].SeedCount
		}
	}
	r.Rows = append(r.Rows, SeedSectionCount{Section: section})
	return &r.Rows[len(r.Rows)-1].SeedCount
}

// MarshalJSON writes the sections' counts as members beside "tokens".
func (r SeedResult) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for _, c := range r.Rows {
		name, _ := json.Marshal(c.Section)
		count, _ := json.Marshal(c.SeedCount)
		b.Write(name)
		b.WriteByte(':')
		b.Write(count)
		b.WriteByte(',')
	}
	type plain SeedResult // without this method
	rest, err := json.Marshal(plain(r))
	if err != nil {
		return nil, err
	}
	b.Write(rest[1:])
	return b.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *SeedResult) UnmarshalJSON(data []byte) error {
	type plain SeedResult
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return err
	}
	*r = SeedResult(p)
	for _, name := range slices.Sorted(maps.Keys(members)) {
		switch name {
		case "tokens", "tenants", "created_tokens":
			continue
		}
		if err := json.Unmarshal(members[name], r.Count(name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// SeedCount counts one kind of row in a SeedResult.
type SeedCount struct {
	// Created rows did not exist before.
	Created int `json:"created"`
	// Existing rows were already there and were left unchanged.
	Existing int `json:"existing"`
}

// SeedCreatedToken is a token minted by Seed for an entry without a fixed
// value.
type SeedCreatedToken struct {
	// Index is the entry's position in SeedFile.Tokens.
	Index    int      `json:"index"`
	ID       string   `json:"id"`
	TenantID string   `json:"tenant"`
	UserID   string   `json:"user"`
	Scopes   []string `json:"scopes"`
	// Token is the secret, shown this once.
	Token string `json:"token"`
}
