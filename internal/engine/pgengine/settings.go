package pgengine

import (
	"context"
	"errors"

	"github.com/idemgate/idemgate/internal/vocab"
)

// TenantApprovalMailTo implements store.TenantSettings.
func (s *Store) TenantApprovalMailTo(ctx context.Context, tenantID string) ([]string, error) {
	var addrs []string
	err := translate(s.pool.QueryRow(ctx, sqlTenantApprovalMailTo, tenantID).Scan(&addrs))
	if errors.Is(err, vocab.ErrNotFound) {
		return nil, nil
	}
	return addrs, err
}

// ListArg implements enginesql.SeedTx: a text[], NULL when v is empty.
func (seedTx) ListArg(v []string) (any, error) {
	if len(v) == 0 {
		return nil, nil
	}
	return v, nil
}
