package vocab_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

// TestCodesListsEveryConstant holds Codes to the Code constants declared in
// the package, so that a new code cannot miss its status and its entry in
// docs/errors.md (the api's tests enumerate Codes).
func TestCodesListsEveryConstant(t *testing.T) {
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var declared []vocab.Code
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					require.True(t, ok && lit.Kind == token.STRING, "a Code constant that is not a string literal")
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					declared = append(declared, vocab.Code(s))
				}
			}
		}
	}
	require.NotEmpty(t, declared)
	require.ElementsMatch(t, declared, vocab.Codes())
}
