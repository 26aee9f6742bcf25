// Package pgtest gives each Postgres test a database of its own, fully
// migrated, cheaply.
//
// The first NewDB call in a test process makes sure a template database
// exists for the current migrations (River's and ours): its name carries a
// fingerprint of them, so a change to any migration, or a River upgrade,
// builds a new template, and an unchanged tree reuses the one built by an
// earlier run. Every NewDB then copies that template with CREATE DATABASE …
// TEMPLATE, which takes tens of milliseconds, and drops the copy when the test
// ends. Tests never share a database, so they may all run in parallel and
// nothing depends on test order.
//
// The server comes from TEST_DATABASE_URL (scripts/test.sh finds or starts
// one and exports it), or DefaultURL. The URL names the admin database that
// new databases are created from; its user needs CREATEDB.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/migrations"
)

const (
	// EnvURL is the environment variable naming the test server's admin
	// database.
	EnvURL = "TEST_DATABASE_URL"

	// DefaultURL is used when EnvURL is unset: the local Postgres that the
	// dev container and scripts/test.sh provide.
	DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

	// DefaultMaxConns is the default Options.MaxConns.
	DefaultMaxConns = 4

	// EnvMaxConns caps every pool on a test database (see MaxConns):
	// scripts/test.sh sets it from the connections the server has free.
	EnvMaxConns = "TEST_DB_MAX_CONNS"

	// DefaultMaxConnsCap is MaxConns when EnvMaxConns is unset.
	DefaultMaxConnsCap = 8

	// TemplatePrefix starts the name of every template database; the rest
	// is the first 12 hex digits of the migrations fingerprint.
	TemplatePrefix = "idemgate_tpl_"

	// DBPrefix starts the name of every per-test database:
	// idemgate_t_<unix seconds at creation>_<16 random hex digits>. The
	// timestamp lets scripts/test.sh drop leftovers of killed test processes
	// (old, nobody connected) without touching a concurrent run's databases.
	DBPrefix = "idemgate_t_"

	// templateLockKey serializes template creation across test processes
	// (go test runs packages in parallel). Advisory locks are scoped to the
	// database they are taken in, so every process takes it in the admin
	// database named by URL.
	templateLockKey int64 = 0x1de3_6a7e_0000_0002

	// refusedFor bounds how long an administrative connection is retried
	// while the server refuses it for too many clients (53300): other
	// tests' databases close their pools meanwhile.
	refusedFor = time.Minute

	// createAttempts and createBackoff bound the retries of CREATE DATABASE
	// while the template is briefly still "accessed by other users" (the
	// backends of the pool that migrated it may still be exiting).
	createAttempts = 10
	createBackoff  = 50 * time.Millisecond

	// adminTimeout bounds each administrative step (create, drop, and the
	// first process's template build).
	adminTimeout = 2 * time.Minute
)

// URL returns the admin database URL of the test server: EnvURL when set,
// else DefaultURL. It must be a URL (postgres://…), not a key=value string.
func URL() string {
	if v := os.Getenv(EnvURL); v != "" {
		return v
	}
	return DefaultURL
}

// MaxConns is the most connections any one pool on a test database may
// open: EnvMaxConns when set (a positive number), else DefaultMaxConnsCap.
// Options.MaxConns above it is lowered to it, and the URLs NewDB returns
// carry it as pool_max_conns, so that every pool a test opens from them
// (an api's, a worker's, a binary's) is bounded too: the suite then fits a
// small or shared server.
func MaxConns() int32 {
	if v := os.Getenv(EnvMaxConns); v != "" {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil && n > 0 {
			return int32(n)
		}
	}
	return DefaultMaxConnsCap
}

// Options tune NewDBWithOptions. The zero value (or nil) gives the defaults.
type Options struct {
	// MaxConns caps the test's pool. Default DefaultMaxConns, and never
	// above the package's MaxConns(). Raise it for tests that hold many
	// connections at once (concurrency tests, River clients with several
	// queues); keep it small otherwise, since every package's tests run
	// against the same server at once.
	MaxConns int32
	// NamePrefix starts the database's name instead of DBPrefix: a team's
	// own rule for naming (and finding) its test databases.
	NamePrefix string
}

// NewDB returns a fresh, fully migrated database for t (River's and
// idemgate's migrations applied): its URL and a pool connected to it with
// the default options. The URL carries pool_max_conns (MaxConns), which
// pgxpool and idemgate's binaries read; for a single pgx connection, take
// pgxpool.ParseConfig(url).ConnConfig, since pgx.Connect would send the
// parameter to the server. The pool is closed and the database dropped when t
// ends. It fails t if the server is unreachable.
func NewDB(t testing.TB) (dbURL string, pool *pgxpool.Pool) {
	t.Helper()
	return NewDBWithOptions(t, nil)
}

// NewDBWithOptions is NewDB with options; nil means the defaults.
func NewDBWithOptions(t testing.TB, opts *Options) (dbURL string, pool *pgxpool.Pool) {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	maxConns := opts.MaxConns
	if maxConns == 0 {
		maxConns = DefaultMaxConns
	}
	if maxConns < 0 {
		t.Fatalf("pgtest: Options.MaxConns must be positive, got %d", maxConns)
	}
	maxConns = min(maxConns, MaxConns())

	tpl, err := templateOnce()
	if err != nil {
		t.Fatalf("pgtest: template database: %v", err)
	}

	name := newDBName(t, opts.NamePrefix)
	dbURL = createDB(t, name, tpl)

	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", EnvURL, err)
	}
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool on %s: %v", name, err)
	}
	t.Cleanup(func() { closePool(t, pool, name) })
	return dbURL, pool
}

// NewEmptyDB returns the URL of a fresh database with no migrations applied
// (a copy of template0), dropped when t ends. Migration tests use it.
func NewEmptyDB(t testing.TB) (dbURL string) {
	t.Helper()
	return createDB(t, newDBName(t, ""), "template0")
}

// Admin returns a connection to the admin database named by URL, closed
// when t ends. Use it for server-wide checks (pg_database, pg_stat_activity)
// and for creating objects outside a test database.
func Admin(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := connectAdmin(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	})
	return conn
}

// createDB creates database name as a copy of template and registers its
// drop with t.Cleanup. It returns the new database's URL.
func createDB(t testing.TB, name, template string) string {
	t.Helper()
	dbURL, err := withDatabase(URL(), name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dbURL = withMaxConns(dbURL, MaxConns())

	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := connectAdmin(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)

	// Dropped when t ends, whether it passed or failed: registered before
	// the database exists (the drop is IF EXISTS), so that no failure
	// between the two leaves it behind.
	t.Cleanup(func() { dropDB(t, name) })
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	for attempt := 1; ; attempt++ {
		_, err = conn.Exec(ctx, sql)
		if err == nil {
			break
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ObjectInUse || attempt == createAttempts {
			t.Fatalf("pgtest: create database %s from %s (attempt %d): %v", name, template, attempt, err)
		}
		time.Sleep(time.Duration(attempt) * createBackoff)
	}
	return dbURL
}

// dropDB drops database name, disconnecting anyone still on it.
func dropDB(t testing.TB, name string) {
	t.Helper()
	// t's own context is already cancelled when cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := connectAdmin(ctx)
	if err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
	}
}

// closePool closes pool, but gives up after a while: pgxpool.Close waits for
// every acquired connection, and a test that leaked one (unclosed rows, an
// unreleased Conn) would otherwise hang the whole package. The drop that
// follows disconnects the leaked connection.
func closePool(t testing.TB, pool *pgxpool.Pool, name string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("pgtest: pool on %s did not close within 10s: a connection was acquired and never released", name)
	}
}

// templateOnce builds or finds the template database once per process and
// remembers the outcome, error included, for every later NewDB.
var templateOnce = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	return ensureTemplate(ctx)
})

// ensureTemplate returns the name of the template database for the current
// migrations, creating and migrating it first if no process has yet. Creation
// happens under templateLockKey so that concurrent test processes build it
// once; a database left half-built by a killed process (not yet marked as a
// template) is dropped and rebuilt.
func ensureTemplate(ctx context.Context) (_ string, retErr error) {
	fingerprint, err := Fingerprint()
	if err != nil {
		return "", err
	}
	name := TemplatePrefix + fingerprint[:12]
	ident := pgx.Identifier{name}.Sanitize()

	conn, err := connectAdmin(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", fmt.Errorf("take template lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLockKey); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("release template lock: %w", err))
		}
	}()

	var isTemplate bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		return name, nil
	case err == nil:
		// Left behind by a process killed while building it.
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident+" WITH (FORCE)"); err != nil {
			return "", fmt.Errorf("drop half-built template %s: %w", name, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("look up template %s: %w", name, err)
	}

	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0"); err != nil {
		return "", fmt.Errorf("create template %s: %w", name, err)
	}
	tplURL, err := withDatabase(URL(), name)
	if err != nil {
		return "", err
	}
	if err := migrateURL(ctx, tplURL); err != nil {
		return "", fmt.Errorf("migrate template %s: %w", name, err)
	}
	// No one may connect to the template from now on: CREATE DATABASE …
	// TEMPLATE fails while anyone is connected to it.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", fmt.Errorf("mark template %s: %w", name, err)
	}
	return name, nil
}

// migrateURL applies every migration to the database at dbURL through a
// short-lived pool.
func migrateURL(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, withMaxConns(dbURL, min(MaxConns(), DefaultMaxConns)))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err = pgengine.Migrate(ctx, pool, nil); err != nil {
		return err
	}
	_, err = pgengine.MigrateLine(ctx, pool, migrations.Builtins(migrations.Postgres), migrations.BuiltinsTable, nil)
	return err
}

// Fingerprint returns the sha256 (hex) over everything that shapes a migrated
// database: the name and contents of every embedded idemgate and built-in
// tools' Postgres migration, and the version number and up SQL of every River migration.
// Hashing River's migrations rather than its module version (which test
// binaries cannot read: their build information lists no dependencies) means
// a River upgrade that changes the schema builds a new template and one that
// does not reuses the old. Template names use its first 12 hex digits.
func Fingerprint() (string, error) {
	h := sha256.New()
	// The version tables too: the same files recorded elsewhere are
	// another template.
	fmt.Fprintf(h, "tables %s %s\n", migrations.Table, migrations.BuiltinsTable)
	for _, line := range []struct {
		prefix string
		fsys   fs.FS
	}{{"idemgate", migrations.Core(migrations.Postgres)}, {"builtins", migrations.Builtins(migrations.Postgres)}} {
		prefix, fsys := line.prefix, line.fsys
		err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(fsys, path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %s %d\n", prefix, path, len(b))
			h.Write(b)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("read embedded migrations: %w", err)
		}
	}

	migrator, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return "", fmt.Errorf("river migrator: %w", err)
	}
	for _, m := range migrator.AllVersions() {
		fmt.Fprintf(h, "river %d %d\n", m.Version, len(m.SQLUp))
		h.Write([]byte(m.SQLUp))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// connectAdmin connects to the admin database named by URL, retrying for
// up to refusedFor while the server refuses connections for too many
// clients.
func connectAdmin(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, URL())
	for deadline, wait := time.Now().Add(refusedFor), 50*time.Millisecond; err != nil && refused(err) && time.Now().Before(deadline); wait = min(2*wait, time.Second) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		conn, err = pgx.Connect(ctx, URL())
	}
	if err != nil {
		return nil, fmt.Errorf("connect to test server (%s=%q; run the tests with scripts/test.sh, which finds or starts Postgres): %w",
			EnvURL, redact(URL()), err)
	}
	return conn, nil
}

// refused reports whether the server refused a connection for too many
// clients (53300), or because it is starting or stopping (57P03).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.TooManyConnections || pgErr.Code == pgerrcode.CannotConnectNow)
}

// withMaxConns returns dbURL with pool_max_conns set to n.
func withMaxConns(dbURL string, n int32) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL // withDatabase made it: it parses
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(int(n)))
	u.RawQuery = q.Encode()
	return u.String()
}

// withDatabase returns base with its database name replaced by name.
func withDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%s must be a postgres:// URL, got %q", EnvURL, redact(base))
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// redact hides a password in a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// newDBName returns a fresh per-test database name, starting with prefix
// (DBPrefix when empty).
func newDBName(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("pgtest: random name: %v", err)
	}
	if prefix == "" {
		prefix = DBPrefix
	}
	return prefix + strconv.FormatInt(time.Now().Unix(), 10) + "_" + hex.EncodeToString(b)
}
