package enginetest

import (
	"io/fs"
	"regexp"
	"strings"

	"github.com/idemgate/idemgate/migrations"
)

// created finds the tables and indexes a migration creates.
var created = regexp.MustCompile(`(?i)CREATE (?:UNIQUE )?(?:TABLE|INDEX) (?:IF NOT EXISTS )?([a-z_0-9]+)`)

// LaterBuiltinObjects are the names of the tables and indexes the
// built-ins' migrations after 00001 create on engine: the schema the
// release that moved the built-in tables did not have.
func LaterBuiltinObjects(engine migrations.Engine) []string {
	dir := migrations.Builtins(engine)
	files, err := fs.Glob(dir, "*.sql")
	if err != nil {
		panic(err)
	}
	var names []string
	for _, f := range files {
		if strings.HasPrefix(f, "00001_") {
			continue
		}
		b, err := fs.ReadFile(dir, f)
		if err != nil {
			panic(err)
		}
		for _, m := range created.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// BuiltinMigrations is how many migrations the built-ins have on engine.
func BuiltinMigrations(engine migrations.Engine) int {
	files, err := fs.Glob(migrations.Builtins(engine), "*.sql")
	if err != nil {
		panic(err)
	}
	return len(files)
}
