package idemgate_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/pgtest"
)

// teamApp is the application_name of the team's own pool.
const teamApp = "team-own-pool"

// teamPool is a team's own pool on a fresh, empty database, its
// connections named teamApp; it stays open until the test ends.
func teamPool(t *testing.T) (dbURL string, pool *pgxpool.Pool) {
	t.Helper()
	dbURL = pgtest.NewEmptyDB(t)
	pc, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams["application_name"] = teamApp
	pc.MaxConns = 4
	pool, err = pgxpool.NewWithConfig(t.Context(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return dbURL, pool
}

// With Options.Pool, idemgate runs on the team's pool and opens none of
// its own: while it migrates, runs its worker and serves mutations, every
// connection Postgres sees on the database is the team pool's (counted by
// the server, pg_stat_activity, not by the pool); Close leaves the pool
// open and usable.
func TestOpenWithTheTeamsPool(t *testing.T) {
	t.Parallel()
	dbURL, pool := teamPool(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	cfg := handConfig(t)
	// The program read DATABASE_URL, made its pool from it, and passes
	// both: idemgate connects to neither URL.
	cfg.DatabaseURL = dbURL
	svc := runConfig(t, cfg, gate.NewRegistry().MustAdd(addNote), &idemgate.Options{Pool: pool})
	token, err := svc.CreateToken(t.Context(), "acme", "bot", "notes:write")
	require.NoError(t, err)
	srv := httptest.NewServer(svc)
	t.Cleanup(srv.Close)
	for _, key := range []string{"team-pool-note-01", "team-pool-note-02", "team-pool-note-03"} {
		status, ans := callJSON(t, http.MethodPost, srv.URL+"/v1/tools/add_note", token, key, `{"text":"hi"}`)
		require.Equal(t, http.StatusOK, status, "%v", ans)
		require.Equal(t, "succeeded", ans["operation"].(map[string]any)["status"], "%v", ans)
	}

	admin := pgtest.Admin(t)
	count := func(query string) int {
		var n int
		require.NoError(t, admin.QueryRow(t.Context(), query, u.Path[1:], teamApp).Scan(&n))
		return n
	}
	others := count(`SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name <> $2`)
	mine := count(`SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`)
	require.Zero(t, others, "connections on the database that are not the team pool's: idemgate opened a pool of its own")
	require.Positive(t, mine, "the team pool's connections are seen")
	t.Logf("connections on the database: %d of the team's pool, %d others", mine, others)

	svc.Close()
	var one int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT 1").Scan(&one), "the team's pool stays open after Close")
	var claims int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM idempotency_claims").Scan(&claims))
	require.Equal(t, 3, claims, "the mutations were claimed on the team's database")
}

// Through a transaction pooler a pool that prepares named statements
// (pgx's default) is refused, naming the option and the mode to use;
// cache_describe is taken.
func TestOpenRefusesAPoolThatPreparesUnderATransactionPooler(t *testing.T) {
	t.Parallel()
	pc, err := pgxpool.ParseConfig("postgres://127.0.0.1:1/none") // connects lazily: nothing listens
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg := handConfig(t)
	cfg.DatabaseURL = ""
	cfg.DBPooler = "transaction"
	_, err = idemgate.Open(t.Context(), cfg, gate.NewRegistry(), &idemgate.Options{Pool: pool})
	require.ErrorContains(t, err, "Options.Pool")
	require.ErrorContains(t, err, "QueryExecModeCacheDescribe")

	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	described, err := pgxpool.NewWithConfig(t.Context(), pc)
	require.NoError(t, err)
	t.Cleanup(described.Close)
	svc, err := idemgate.Open(t.Context(), cfg, gate.NewRegistry(), &idemgate.Options{Pool: described})
	require.NoError(t, err)
	svc.Close()
}

// With Options.DB, idemgate runs on the team's SQLite handle (opened as
// idemgate opens its own) and Close leaves it open; a handle idemgate
// cannot work on is refused with what to change.
func TestOpenWithTheTeamsSQLiteDB(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "team.db")
	db, err := sql.Open("sqlite", sqliteengine.DSN(path))
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	cfg := handConfig(t)
	cfg.DatabaseURL = ""
	svc := runConfig(t, cfg, gate.NewRegistry().MustAdd(addNote), &idemgate.Options{DB: db})
	token, err := svc.CreateToken(t.Context(), "acme", "bot", "notes:write")
	require.NoError(t, err)
	srv := httptest.NewServer(svc)
	t.Cleanup(srv.Close)
	status, ans := callJSON(t, http.MethodPost, srv.URL+"/v1/tools/add_note", token, "team-db-note-01", `{"text":"hi"}`)
	require.Equal(t, http.StatusOK, status, "%v", ans)
	require.Equal(t, "succeeded", ans["operation"].(map[string]any)["status"], "%v", ans)
	var claims int
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT count(*) FROM idempotency_claims").Scan(&claims))
	require.Equal(t, 1, claims, "the claim is in the team's file")

	t.Run("Refused", func(t *testing.T) {
		open := func(dsn string, conns int) *sql.DB {
			d, err := sql.Open("sqlite", dsn)
			require.NoError(t, err)
			d.SetMaxOpenConns(conns)
			t.Cleanup(func() { _ = d.Close() })
			return d
		}
		other := filepath.Join(t.TempDir(), "other.db")
		for _, tt := range []struct {
			name string
			db   *sql.DB
			want string
		}{
			{"ManyConns", open(sqliteengine.DSN(other), 4), "SetMaxOpenConns(1)"},
			{"NoBusyTimeout", open("file:"+other, 1), "busy_timeout"},
			{"Deferred", open("file:"+other+"?_pragma=busy_timeout(5000)", 1), "_txlock=immediate"},
		} {
			c := handConfig(t)
			c.DatabaseURL = ""
			_, err := idemgate.Open(context.Background(), c, gate.NewRegistry(), &idemgate.Options{DB: tt.db})
			require.ErrorContains(t, err, "Options.DB", tt.name)
			require.ErrorContains(t, err, tt.want, tt.name)
		}
		c := handConfig(t)
		c.DatabaseURL = "postgres://127.0.0.1:1/x"
		_, err := idemgate.Open(context.Background(), c, gate.NewRegistry(), &idemgate.Options{DB: db})
		require.ErrorContains(t, err, "names Postgres")
	})
}
