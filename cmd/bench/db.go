package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/internal/builtins"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
)

const (
	// dbPrefix starts the name of every benchmark database:
	// idemgate_bench_<unix seconds>_<hex>, so that scripts/bench.sh can drop
	// the leftovers of a killed run (old, nobody connected) without touching
	// a concurrent run's databases.
	dbPrefix = "idemgate_bench_"
	// tplPrefix starts the benchmark template's name; the rest is the
	// migrations fingerprint (internal/pgtest's), so a schema change builds
	// a new template and an unchanged tree reuses the last one.
	tplPrefix = "idemgate_benchtpl_"
	// tplLockKey serializes template creation across benchmark processes.
	tplLockKey int64 = 0x1de3_6a7e_0000_00b1

	benchTenant = "bench"
	benchToken  = "idg_bench_token_0001"
	customers   = 100
	// orders are the refund figures' orders, each charged orderCents: more
	// than all the refunds a run makes against it (at most 10 000 cents each).
	orders     = 100
	orderCents = 1_000_000_000
)

// dbServer creates and drops benchmark databases on one Postgres server.
type dbServer struct {
	adminURL string
	tpl      string
}

func connectAdmin(ctx context.Context, adminURL string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres at %s (set BENCH_DATABASE_URL): %w", redact(adminURL), err)
	}
	return conn, nil
}

// newDBServer finds or builds the migrated template database.
func newDBServer(ctx context.Context, adminURL string) (*dbServer, error) {
	fp, err := pgtest.Fingerprint()
	if err != nil {
		return nil, err
	}
	name := tplPrefix + fp[:12]
	conn, err := connectAdmin(ctx, adminURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", tplLockKey); err != nil {
		return nil, err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", tplLockKey) }()

	ident := pgx.Identifier{name}.Sanitize()
	var isTemplate bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		return &dbServer{adminURL: adminURL, tpl: name}, nil
	case err == nil:
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident+" WITH (FORCE)"); err != nil {
			return nil, err
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0"); err != nil {
		return nil, fmt.Errorf("create template %s: %w", name, err)
	}
	tplURL, err := withDatabase(adminURL, name)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, tplURL)
	if err != nil {
		return nil, err
	}
	_, err = pgengine.Migrate(ctx, pool, nil)
	if err == nil {
		_, err = builtins.MigratePostgres(ctx, pool, nil) // the built-in tools' tables
	}
	pool.Close()
	if err != nil {
		return nil, fmt.Errorf("migrate template %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return nil, err
	}
	return &dbServer{adminURL: adminURL, tpl: name}, nil
}

// benchDB is one fresh, migrated and seeded database.
type benchDB struct {
	name string
	url  string
	srv  *dbServer
}

// create makes a fresh database from the template and seeds the benchmark
// tenant's token, customers and orders.
func (s *dbServer) create(ctx context.Context) (*benchDB, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := dbPrefix + strconv.FormatInt(time.Now().Unix(), 10) + "_" + hex.EncodeToString(b[:])
	dbURL, err := withDatabase(s.adminURL, name)
	if err != nil {
		return nil, err
	}
	conn, err := connectAdmin(ctx, s.adminURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{s.tpl}.Sanitize()
	for attempt := 1; ; attempt++ {
		_, err = conn.Exec(ctx, sql)
		if err == nil {
			break
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ObjectInUse || attempt == 10 {
			return nil, fmt.Errorf("create database %s: %w", name, err)
		}
		time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
	}
	db := &benchDB{name: name, url: dbURL, srv: s}
	if err := db.seed(ctx); err != nil {
		db.drop()
		return nil, err
	}
	return db, nil
}

func (db *benchDB) seed(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, db.url)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows := &tools.Seed{}
	f := &store.SeedFile{Rows: rows, Tokens: []store.SeedToken{{
		Tenant: benchTenant, User: "bench-agent", Token: benchToken,
		Scopes: []string{"billing:credit", "billing:refund", "operations:read"},
	}}}
	for i := range customers {
		rows.Customers = append(rows.Customers, tools.SeedCustomer{Tenant: benchTenant, CustomerID: customerID(i), Currency: "usd"})
	}
	for i := range orders {
		rows.Orders = append(rows.Orders, tools.SeedOrder{Tenant: benchTenant, OrderID: orderID(i), ChargeID: fmt.Sprintf("ch_bench_%03d", i),
			AmountCents: orderCents, Currency: "usd"})
	}
	_, err = pgengine.New(pool).Seed(ctx, f)
	return err
}

// drop drops the database, disconnecting anyone left on it.
func (db *benchDB) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := connectAdmin(ctx, db.srv.adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.name}.Sanitize()+" WITH (FORCE)")
}

// openPool opens a pool of maxConns connections on the database, the way
// pgengine.OpenPostgres does, and opens them all now so that connection set-up
// is not measured.
func (db *benchDB) openPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		return nil, err
	}
	pc.ConnConfig.ConnectTimeout = 5 * time.Second
	pc.MaxConns = maxConns
	pc.HealthCheckPeriod = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	conns := make([]*pgxpool.Conn, 0, maxConns)
	for range maxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return pool, nil
}

func customerID(i int) string { return fmt.Sprintf("cus_%03d", i) }

func orderID(i int) string { return fmt.Sprintf("ord_%03d", i) }

// withDatabase returns base with its database name replaced by name.
func withDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("the database URL must be a postgres:// URL, got %q", redact(base))
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
