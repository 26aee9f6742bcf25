package surface_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoInit finds no init function in the module's code (tests apart):
// parts are tied together by calls a reader can follow, never by the
// side effects of an import.
func TestNoInit(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	var found []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".tmp", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		found = append(found, inits(t, path)...)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk found the module's files")
	require.Empty(t, found, "init functions in product code")
}

// TestNoInitFindsOne shows the check finding an init.
func TestNoInitFindsOne(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.go")
	require.NoError(t, os.WriteFile(path, []byte("package x\n\nfunc init() {}\n"), 0o600))
	require.Len(t, inits(t, path), 1)
}

// inits lists the init functions of one file, as path:line.
func inits(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	var out []string
	for _, decl := range f.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "init" {
			out = append(out, fset.Position(fn.Pos()).String())
		}
	}
	return out
}
