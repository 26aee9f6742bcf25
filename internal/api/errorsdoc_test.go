package api

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

const errorsDoc = "../../docs/errors.md"

var (
	// | `code` | 402 | from | retry |
	docRow = regexp.MustCompile("^\\| `([a-z0-9_]+)` \\| ([^|]+?) \\|")
	// ### `code`
	docHeading = regexp.MustCompile("^### `([a-z0-9_]+)`\\s*$")
)

// TestErrorsDocListsEveryCode holds docs/errors.md to the codes that exist
// (domain's and those the built-in tools and the worker store) and to the
// status table: every code has a table row and a section, no entry names a
// code that does not exist, and each row's status is the api's.
func TestErrorsDocListsEveryCode(t *testing.T) {
	raw, err := os.ReadFile(errorsDoc)
	require.NoError(t, err)
	doc := string(raw)
	rows, headings := docEntries(t, doc)
	known := knownCodes(t)

	for c := range known {
		_, row := rows[c]
		require.True(t, row, "%s exists but has no row in the table of %s", c, errorsDoc)
		require.True(t, headings[c], "%s exists but has no ### section in %s", c, errorsDoc)
	}
	for c := range rows {
		require.True(t, known[c], "%s has a row in %s but no such code exists", c, errorsDoc)
	}
	for c := range headings {
		require.True(t, known[c], "%s has a section in %s but no such code exists", c, errorsDoc)
	}
	for c := range codeStatus {
		require.True(t, known[c], "codeStatus lists %s, which no code is", c)
	}

	for c, cell := range rows {
		_, listed := codeStatus[c]
		if cell == "—" {
			require.False(t, listed, "%s: the doc says it has no status, codeStatus gives %d", c, codeStatus[c])
			require.NotContains(t, vocab.Codes(), c, "%s: a domain code answers a status", c)
			continue
		}
		n, err := strconv.Atoi(cell)
		require.NoError(t, err, "%s: status cell %q", c, cell)
		require.True(t, listed, "%s: the doc gives %d, but codeStatus does not list it", c, n)
		require.Equal(t, statusFor(c), n, "%s: the doc's status is not the api's", c)
	}
	require.Contains(t, doc, fmt.Sprintf("**%d**", defaultStatus), "the doc states the default status for a team's own codes")
	require.Contains(t, doc, "https://idemgate.dev/errors/<code>", "the doc names the problem type URLs")
}

// docEntries returns the codes of the doc's status table, each with its
// status cell, and those that have a ### section; none may appear twice.
func docEntries(t *testing.T, doc string) (rows map[vocab.Code]string, headings map[vocab.Code]bool) {
	t.Helper()
	rows = map[vocab.Code]string{}
	headings = map[vocab.Code]bool{}
	for i, line := range strings.Split(doc, "\n") {
		if m := docRow.FindStringSubmatch(line); m != nil {
			code := vocab.Code(m[1])
			_, dup := rows[code]
			require.False(t, dup, "line %d: %s has a second table row", i+1, code)
			rows[code] = strings.TrimSpace(m[2])
		}
		if m := docHeading.FindStringSubmatch(line); m != nil {
			code := vocab.Code(m[1])
			require.False(t, headings[code], "line %d: %s has a second section", i+1, code)
			headings[code] = true
		}
	}
	return rows, headings
}

// knownCodes returns the codes that exist: domain's and those the source
// stores or answers.
func knownCodes(t *testing.T) map[vocab.Code]bool {
	t.Helper()
	known := map[vocab.Code]bool{}
	for _, c := range vocab.Codes() {
		known[c] = true
	}
	stored := sourceCodes(t)
	for _, c := range []vocab.Code{"transient", "mail_rejected", "mail_error", "downstream_auth", "downstream_error"} {
		require.True(t, stored[c], "the source scan found no %s: is it still finding codes?", c)
	}
	for c := range stored {
		known[c] = true
	}
	return known
}

// codeSources are the directories whose non-test Go files may make codes;
// the ones ending in /... are walked.
var codeSources = []string{"../tools/...", "../vocab/...", "../../domain", "../jobs", "../core", "../../gate", "../ops", "."}

// sourceCodes returns the code literals the code base stores or answers:
// the first argument of gate.NothingHappened, Happened, Transient, the
// tools' errInfo and domain.Errorf, a Code member of a composite literal,
// and domain.Code(...) conversions, each a string literal or a string
// constant of its package.
func sourceCodes(t *testing.T) map[vocab.Code]bool {
	t.Helper()
	codes := map[vocab.Code]bool{}
	fset := token.NewFileSet()
	for _, dir := range codeDirs(t) {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		var files []*ast.File
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			require.NoError(t, err)
			files = append(files, f)
		}
		consts := stringConsts(files)
		value := func(e ast.Expr) (string, bool) {
			switch e := e.(type) {
			case *ast.BasicLit:
				if e.Kind == token.STRING {
					s, err := strconv.Unquote(e.Value)
					return s, err == nil
				}
			case *ast.Ident:
				s, ok := consts[e.Name]
				return s, ok
			}
			return "", false
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				var arg ast.Expr
				switch n := n.(type) {
				case *ast.CallExpr:
					if len(n.Args) > 0 && makesCode(n.Fun) {
						arg = n.Args[0]
					}
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Code" {
						arg = n.Value
					}
				}
				if arg != nil {
					if s, ok := value(arg); ok {
						codes[vocab.Code(s)] = true
					}
				}
				return true
			})
		}
	}
	return codes
}

// codeDirs returns the directories of codeSources, the walked ones expanded.
func codeDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, src := range codeSources {
		root, walk := strings.CutSuffix(src, "/...")
		if !walk {
			dirs = append(dirs, root)
			continue
		}
		require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return err
		}))
	}
	return dirs
}

// makesCode reports whether a call of fun takes a code first.
func makesCode(fun ast.Expr) bool {
	switch f := fun.(type) {
	case *ast.Ident:
		return slices.Contains([]string{"NothingHappened", "Happened", "Transient", "errInfo", "Code"}, f.Name)
	case *ast.SelectorExpr:
		pkg, _ := f.X.(*ast.Ident)
		switch {
		case pkg == nil:
		case pkg.Name == "domain" || pkg.Name == "vocab":
			return f.Sel.Name == "Errorf" || f.Sel.Name == "Code"
		case pkg.Name == "gate":
			return slices.Contains([]string{"NothingHappened", "Happened", "Transient"}, f.Sel.Name)
		}
	}
	return false
}

// stringConsts returns the package-level string constants of files.
func stringConsts(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if s, err := strconv.Unquote(lit.Value); err == nil {
								out[name.Name] = s
							}
						}
					}
				}
			}
		}
	}
	return out
}
