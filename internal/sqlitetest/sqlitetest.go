// Package sqlitetest gives each SQLite test a database file of its own,
// fully migrated, cheaply.
//
// The first NewDB call in a test process makes sure a template file exists
// for the current migrations (River's and ours): its name carries a
// fingerprint of them, so a change to any migration, or a River upgrade,
// builds a new template, and an unchanged tree reuses the one an earlier run
// built. The template lives in TemplateDir; it is written under a temporary
// name and renamed into place, so concurrent test processes never see half
// of one. Every NewDB then copies the template into the test's own
// t.TempDir(), which is removed when the test ends. Tests never share a
// file, so they may all run in parallel.
package sqlitetest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/migrations"
)

// FileName is the name of the database file in each test's directory.
const FileName = "idemgate.sqlite3"

// templatePrefix starts the name of every template file; the rest is the
// first 12 hex digits of the migrations fingerprint.
const templatePrefix = "idemgate_tpl_"

// buildTimeout bounds the first process's template build.
const buildTimeout = 2 * time.Minute

// TemplateDir is where template files are kept between runs.
func TemplateDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("idemgate-sqlitetest-%d", os.Getuid()))
}

// NewDB returns a fresh, fully migrated database file for t (River's and
// idemgate's migrations applied): its path and a *sql.DB opened on it with
// sqliteengine.Open. The database is closed and its directory removed when t
// ends.
func NewDB(t testing.TB) (path string, db *sql.DB) {
	t.Helper()
	tpl, err := templateOnce()
	if err != nil {
		t.Fatalf("sqlitetest: template database: %v", err)
	}
	path = filepath.Join(t.TempDir(), FileName)
	if err := copyFile(tpl, path); err != nil {
		t.Fatalf("sqlitetest: copy template: %v", err)
	}
	return path, open(t, path)
}

// NewEmptyDB returns a fresh database file with no migrations applied, and
// a *sql.DB opened on it with sqliteengine.Open, closed when t ends.
// Migration tests use it.
func NewEmptyDB(t testing.TB) (path string, db *sql.DB) {
	t.Helper()
	path = filepath.Join(t.TempDir(), FileName)
	return path, open(t, path)
}

// Open opens another *sql.DB on the database file at path, as a second
// process would, closed when t ends.
func Open(t testing.TB, path string) *sql.DB {
	t.Helper()
	return open(t, path)
}

func open(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sqliteengine.Open(path)
	if err != nil {
		t.Fatalf("sqlitetest: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("sqlitetest: close %s: %v", path, err)
		}
	})
	return db
}

// templateOnce finds or builds the template once per process and remembers
// the outcome, error included, for every later NewDB.
var templateOnce = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	return ensureTemplate(ctx)
})

// ensureTemplate returns the path of the template for the current
// migrations, building it first if no run has yet.
func ensureTemplate(ctx context.Context) (string, error) {
	fingerprint, err := Fingerprint()
	if err != nil {
		return "", err
	}
	dir := TemplateDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tpl := filepath.Join(dir, templatePrefix+fingerprint[:12]+".sqlite3")
	if _, err := os.Stat(tpl); err == nil {
		return tpl, nil
	}

	// Migrate a scratch file, then write a compact standalone copy of it
	// (no WAL beside it) under a temporary name and rename it into place.
	scratch, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	db, err := sqliteengine.Open(filepath.Join(scratch, FileName))
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := sqliteengine.Migrate(ctx, db, nil); err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := sqliteengine.MigrateLine(ctx, db, migrations.Builtins(migrations.SQLite), migrations.BuiltinsTable, nil); err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	tmp := filepath.Join(scratch, "template.sqlite3")
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", tmp); err != nil {
		return "", fmt.Errorf("write template: %w", err)
	}
	if err := os.Rename(tmp, tpl); err != nil {
		return "", fmt.Errorf("install template: %w", err)
	}
	return tpl, nil
}

// copyFile copies the template at src to a new file at dst.
func copyFile(src, dst string) (retErr error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err := out.Close(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	_, err = io.Copy(out, in)
	return err
}

// Fingerprint returns the sha256 (hex) over everything that shapes a
// migrated database: the name and contents of every embedded idemgate and
// built-in tools' SQLite migration, and the version number and up SQL of every River SQLite
// migration. Template names use its first 12 hex digits.
func Fingerprint() (string, error) {
	h := sha256.New()
	// The version tables too: the same files recorded elsewhere are
	// another template.
	fmt.Fprintf(h, "tables %s %s\n", migrations.Table, migrations.BuiltinsTable)
	for _, line := range []struct {
		prefix string
		fsys   fs.FS
	}{{"idemgate", migrations.Core(migrations.SQLite)}, {"builtins", migrations.Builtins(migrations.SQLite)}} {
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

	migrator, err := rivermigrate.New(riversqlite.New(nil), nil)
	if err != nil {
		return "", fmt.Errorf("river migrator: %w", err)
	}
	for _, m := range migrator.AllVersions() {
		fmt.Fprintf(h, "river %d %d\n", m.Version, len(m.SQLUp))
		h.Write([]byte(m.SQLUp))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
