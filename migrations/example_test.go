package migrations_test

import (
	"fmt"
	"io/fs"

	"github.com/idemgate/idemgate/migrations"
)

// The first core Postgres migration, the built-in tools' Postgres
// migrations, and the two version tables.
func Example() {
	core, err := fs.Glob(migrations.Core(migrations.Postgres), "*.sql")
	if err != nil {
		panic(err)
	}
	builtins, err := fs.Glob(migrations.Builtins(migrations.Postgres), "*.sql")
	if err != nil {
		panic(err)
	}
	fmt.Println(core[0])
	fmt.Println(builtins)
	fmt.Println(migrations.Table, migrations.BuiltinsTable)
	// Output:
	// 00001_init.sql
	// [00001_builtins.sql 00002_approval_thresholds.sql 00003_provider.sql 00004_provider_poll.sql]
	// idemgate_db_version builtin_goose_db_version
}
