package idemgate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

type probeArgs struct {
	Label string `json:"label" idem:"minlen=1,maxlen=20"`
}

type probeResult struct {
	Engine   string `json:"engine"`
	Read     int    `json:"read"`
	WriteErr string `json:"write_err"`
}

// probeDB reads through its transaction, then tries to write through it.
var probeDB = &gate.Read[probeArgs, probeResult]{
	Name: "probe_db", Title: "Probe the database", Description: "Reads, then tries a write.", Scope: "notes:write",
	Handle: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *probeArgs) (*probeResult, error) {
		r := &probeResult{Engine: tx.Engine()}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM idempotency_claims WHERE tenant_id = $1`, caller.TenantID).Scan(&r.Read); err != nil {
			return nil, err
		}
		_, err := tx.Exec(ctx, `DELETE FROM idempotency_claims WHERE tenant_id = $1`, caller.TenantID)
		if err != nil {
			r.WriteErr = err.Error()
		}
		return r, nil
	},
}

// A read tool's transaction reads the service's own database and refuses
// writes, on both engines; the connection it used stays writable (SQLite's
// one connection included): mutations after it succeed.
func TestReadToolsGetAReadOnlyTransaction(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{gate.SQLite, gate.Postgres} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			dbURL := "sqlite:" + filepath.Join(t.TempDir(), "read.db")
			if engine == gate.Postgres {
				dbURL, _ = postgresDB(t, 3)
			}
			svc := runService(t, dbURL, gate.NewRegistry().MustAdd(addNote, probeDB), nil)
			token, err := svc.CreateToken(t.Context(), "acme", "bot", "notes:write")
			require.NoError(t, err)
			srv := httptest.NewServer(svc)
			t.Cleanup(srv.Close)

			post := func(path, key, body string) (int, map[string]any) {
				return callJSON(t, http.MethodPost, srv.URL+path, token, key, body)
			}
			for i, key := range []string{"read-tx-note-01", "read-tx-note-02"} {
				status, ans := post("/v1/tools/add_note", key, `{"text":"hi"}`)
				require.Less(t, status, 300, "%v", ans)
				status, probe := post("/v1/tools/probe_db", "", `{"label":"x"}`)
				require.Equal(t, http.StatusOK, status, "%v", probe)
				require.Equal(t, engine, probe["engine"])
				require.Equal(t, float64(i+1), probe["read"], "the read sees the service's own rows")
				require.NotEmpty(t, probe["write_err"], "a write through a read's transaction fails")
			}
			// The refused write changed nothing; mutations still work after
			// the reads (the connection went back writable).
			status, ans := post("/v1/tools/add_note", "read-tx-note-03", `{"text":"after"}`)
			require.Less(t, status, 300, "%v", ans)
			_, probe := post("/v1/tools/probe_db", "", `{"label":"x"}`)
			require.Equal(t, float64(3), probe["read"])
		})
	}
}
