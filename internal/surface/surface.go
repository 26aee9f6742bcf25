// Package surface measures the module's public surface: which packages a
// user can import, the exported names they hold, and any internal type a
// public signature names. The root package's surface test uses it; so does
// `go run ./internal/surface/cmd/surface`, which prints the count.
package surface

import (
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// Package is one public package's measure.
type Package struct {
	Path string
	// Names are the exported names, qualified: "Open", "Service.Close",
	// "Options.Logger".
	Names []string
	// Leaks are exported names whose types name an internal package's type.
	Leaks []string
	// Fields are the Names that are exported struct fields: the budget on
	// top-level names and methods leaves them out.
	Fields []string
}

// Declared is the count of top-level names and exported methods: Names
// without Fields.
func (p Package) Declared() int { return len(p.Names) - len(p.Fields) }

// PublicPackages lists the importable packages of the module in dir: not
// under internal/, not a command, not a test-only package.
func PublicPackages(dir string) ([]string, error) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}}", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, name, _ := strings.Cut(line, " ")
		if name == "main" || isInternal(path) {
			continue
		}
		pkgs = append(pkgs, path)
	}
	sort.Strings(pkgs)
	return pkgs, nil
}

func isInternal(path string) bool {
	return strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal")
}

// Measure type-checks each package from source and lists its exported
// names and leaks.
func Measure(dir string, paths []string) ([]Package, error) {
	exports, err := exportData(dir, paths)
	if err != nil {
		return nil, err
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var res []Package
	for _, path := range paths {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		res = append(res, measure(pkg))
	}
	return res, nil
}

// exportData builds paths and their dependencies (from the build cache
// when it can) and returns each package's export data file.
func exportData(dir string, paths []string) (map[string]string, error) {
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}, paths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %w: %s", err, stderr.String())
	}
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, " ")
		if file != "" {
			files[path] = file
		}
	}
	return files, nil
}

func measure(pkg *types.Package) Package {
	p := Package{Path: pkg.Path()}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		p.Names = append(p.Names, name)
		if leaksInternal(obj.Type(), map[types.Type]bool{}, obj) {
			p.Leaks = append(p.Leaks, name)
		}
		tn, ok := obj.(*types.TypeName)
		if !ok {
			continue
		}
		p.members(name, tn.Type())
	}
	return p
}

// members adds a type's exported fields and methods (declared on it or on
// its pointer; for an interface, its methods).
func (p *Package) members(name string, t types.Type) {
	seen := map[string]bool{}
	add := func(member string, mt types.Type, field bool) {
		if seen[member] {
			return
		}
		if field {
			p.Fields = append(p.Fields, name+"."+member)
		}
		seen[member] = true
		p.Names = append(p.Names, name+"."+member)
		if leaksInternal(mt, map[types.Type]bool{}, nil) {
			p.Leaks = append(p.Leaks, name+"."+member)
		}
	}
	if named, ok := types.Unalias(t).(*types.Named); ok {
		for m := range named.Methods() {
			if m.Exported() {
				add(m.Name(), m.Type(), false)
			}
		}
	}
	switch u := t.Underlying().(type) {
	case *types.Struct:
		for f := range u.Fields() {
			if f.Exported() {
				add(f.Name(), f.Type(), true)
			}
		}
	case *types.Interface:
		for m := range u.Methods() {
			if m.Exported() {
				add(m.Name(), m.Type(), false)
			}
		}
	}
}

// leaksInternal reports whether t names a type of an internal package. For
// a public named type only its name counts (its members are measured on
// their own); an alias to an internal type is a leak.
func leaksInternal(t types.Type, seen map[types.Type]bool, obj types.Object) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if a, ok := t.(*types.Alias); ok {
		if o := a.Obj(); o.Pkg() != nil && isInternal(o.Pkg().Path()) {
			return true
		}
		return leaksInternal(types.Unalias(a), seen, nil)
	}
	switch t := t.(type) {
	case *types.Named:
		o := t.Obj()
		if o.Pkg() != nil && isInternal(o.Pkg().Path()) {
			return true
		}
		for a := range t.TypeArgs().Types() {
			if leaksInternal(a, seen, nil) {
				return true
			}
		}
		if tn, ok := obj.(*types.TypeName); ok && tn.Type() == t {
			// The declaration itself: its members are measured one by one,
			// and the unexported ones are no one's business.
			return false
		}
		return false
	case *types.Pointer:
		return leaksInternal(t.Elem(), seen, nil)
	case *types.Slice:
		return leaksInternal(t.Elem(), seen, nil)
	case *types.Array:
		return leaksInternal(t.Elem(), seen, nil)
	case *types.Map:
		return leaksInternal(t.Key(), seen, nil) || leaksInternal(t.Elem(), seen, nil)
	case *types.Chan:
		return leaksInternal(t.Elem(), seen, nil)
	case *types.Signature:
		return tupleLeaks(t.Params(), seen) || tupleLeaks(t.Results(), seen)
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() && leaksInternal(f.Type(), seen, nil) {
				return true
			}
		}
	case *types.Interface:
		for m := range t.Methods() {
			if m.Exported() && leaksInternal(m.Type(), seen, nil) {
				return true
			}
		}
	}
	return false
}

func tupleLeaks(tu *types.Tuple, seen map[types.Type]bool) bool {
	for v := range tu.Variables() {
		if leaksInternal(v.Type(), seen, nil) {
			return true
		}
	}
	return false
}
