package idemgate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/surface"
)

// TestEveryPublicPackageHasARunnableExample: each importable package shows
// its use in at least one Example function with an "// Output:" comment, so
// `go test` runs it and checks what it prints (the test kit's included).
func TestEveryPublicPackageHasARunnableExample(t *testing.T) {
	t.Parallel()
	paths, err := surface.PublicPackages(".")
	require.NoError(t, err)
	for _, path := range paths {
		dir := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if dir == "" {
			dir = "."
		}
		if path == module+"/builtins" {
			continue // exports nothing: importing it links the built-ins
		}
		runnable := runnableExamples(t, dir)
		require.NotEmpty(t, runnable, "%s: no Example function with an // Output: comment", path)
		t.Logf("%s: %s", path, strings.Join(runnable, ", "))
	}
}

// runnableExamples lists the Example functions of dir's test files whose
// body holds an "Output:" comment.
func runnableExamples(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	require.NoError(t, err)
	var names []string
	for _, name := range files {
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
				continue
			}
			for _, cg := range f.Comments {
				if cg.Pos() < fn.Body.Lbrace || cg.End() > fn.Body.Rbrace {
					continue
				}
				text := strings.TrimSpace(cg.Text())
				if strings.HasPrefix(text, "Output:") || strings.HasPrefix(text, "Unordered output:") {
					names = append(names, fn.Name.Name)
					break
				}
			}
		}
	}
	return names
}
