// Package migrations holds every SQL migration idemgate applies to its
// database, as goose-format files a team can apply with its own tool
// (goose, atlas, golang-migrate) instead of idemgate's Migrate:
//
//   - Core: idemgate's own tables (claims, audit, tokens, tenants' settings),
//     recorded in the version table Table;
//   - Builtins: the built-in tools' tables (orders, ledger, seats, reset
//     tokens), recorded in BuiltinsTable; needed only with package builtins.
//
// River's tables are not here: River's own migrator (rivermigrate) applies
// them, up to RiverVersion, before idemgate's.
//
// Each line keeps its own version table, never goose's default
// (goose_db_version), so a team's own goose migrations and idemgate's do not
// see each other's versions. The package imports only the standard library.
package migrations

import (
	"embed"
	"io/fs"
)

// Engine names a database engine: Postgres or SQLite.
type Engine string

// The engines, named as gate.Postgres and gate.SQLite name them.
const (
	Postgres Engine = "postgres"
	SQLite   Engine = "sqlite"
)

// Table is the goose version table of idemgate's core migrations (Core).
const Table = "idemgate_db_version"

// BuiltinsTable is the goose version table of the built-in tools'
// migrations (Builtins).
const BuiltinsTable = "builtin_goose_db_version"

// RiverVersion is the River schema version idemgate requires: the latest
// migration of the River release it is built with. A team that applies
// River's migrations itself migrates River at least this far.
const RiverVersion = 8

//go:embed postgres/*.sql sqlite/*.sql builtins/postgres/*.sql builtins/sqlite/*.sql
var files embed.FS

// Core returns idemgate's core migrations for engine: goose SQL files
// (00001_init.sql, …) at the root of the returned FS. It panics on an
// engine other than Postgres and SQLite.
func Core(engine Engine) fs.FS {
	return sub(string(check(engine)))
}

// Builtins returns the built-in tools' migrations for engine, goose SQL
// files at the root of the returned FS. It panics on an engine other than
// Postgres and SQLite.
func Builtins(engine Engine) fs.FS {
	return sub("builtins/" + string(check(engine)))
}

func check(engine Engine) Engine {
	if engine != Postgres && engine != SQLite {
		panic("migrations: unknown engine " + string(engine))
	}
	return engine
}

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // dir is one of the embedded directories
	}
	return f
}
