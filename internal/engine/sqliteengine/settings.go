package sqliteengine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/internal/vocab"
)

// TenantApprovalMailTo implements store.TenantSettings.
func (s *Store) TenantApprovalMailTo(ctx context.Context, tenantID string) ([]string, error) {
	var stored sql.NullString
	err := translate(s.db.QueryRowContext(ctx, sqlTenantApprovalMailTo, tenantID).Scan(&stored))
	switch {
	case errors.Is(err, vocab.ErrNotFound), err == nil && !stored.Valid:
		return nil, nil
	case err != nil:
		return nil, err
	}
	var addrs []string
	if err := json.Unmarshal([]byte(stored.String), &addrs); err != nil {
		return nil, fmt.Errorf("sqliteengine: tenant %s approval_mail_to: %w", tenantID, err)
	}
	return addrs, nil
}

// ListArg implements enginesql.SeedTx: a JSON array, NULL when v is
// empty.
func (seedTx) ListArg(v []string) (any, error) {
	if len(v) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}
