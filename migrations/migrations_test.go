package migrations_test

import (
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/migrations"
)

// Both engines have the same versions, in goose's format, on each line.
func TestSameVersionsOnBothEngines(t *testing.T) {
	for _, line := range []struct {
		name string
		fsys func(migrations.Engine) fs.FS
	}{{"core", migrations.Core}, {"builtins", migrations.Builtins}} {
		pg := sqlFiles(t, line.fsys(migrations.Postgres))
		lite := sqlFiles(t, line.fsys(migrations.SQLite))
		if len(pg) == 0 || !slices.Equal(pg, lite) {
			t.Errorf("%s: Postgres files %v, SQLite files %v", line.name, pg, lite)
		}
		for _, e := range []migrations.Engine{migrations.Postgres, migrations.SQLite} {
			for _, name := range sqlFiles(t, line.fsys(e)) {
				b, err := fs.ReadFile(line.fsys(e), name)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(b), "-- +goose Up") {
					t.Errorf("%s %s %s: no -- +goose Up", line.name, e, name)
				}
			}
		}
	}
}

func TestUnknownEnginePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Core(\"mysql\") did not panic")
		}
	}()
	migrations.Core("mysql")
}

func sqlFiles(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	return names
}
