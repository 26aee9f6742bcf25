package surface

import (
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// Layers orders the module's packages from the leaves up, by path relative
// to the module ("." is the root package). A package may import packages
// of its own layer or lower ones, never a higher one. A prefix ending in
// "/" covers a folder and everything under it; the longest match wins.
var Layers = [][]string{
	// Leaves: import nothing of ours.
	{"domain", "jobs", "migrations", "internal/telemetry", "internal/tenancy/tokenspec", "internal/surface/", "internal/procstat", "internal/logtest", "internal/groups"},
	// The shared internal types.
	{"internal/vocab"},
	// The gate's core (its store contract included) and the domain's clients.
	{"internal/core", "internal/vocab/refunds", "internal/vocab/resetmail", "internal/vocab/resettoken", "internal/vocab/approvalmail", "internal/oauth"},
	// What the engines store besides the gate.
	{"internal/store/", "internal/tenancy"},
	// The driver contract (engine.Driver, engine.Store) and what the
	// drivers share.
	{"internal/engine", "internal/engine/internal/"},
	// The engine drivers, as River's riverpgxv5 and riversqlite: on the
	// contract and the leaves only, below the process configuration, the
	// public API and the worker. Their transaction is a gate.Tx by its
	// method set, not by an import.
	{"internal/engine/pgengine", "internal/engine/sqliteengine"},
	// The process configuration.
	{"internal/config"},
	// What the assembly reads of a declaration.
	{"internal/toolspec"},
	// The public gate API (declaring tools).
	{"gate"},
	// The product's parts, built on the tool API, and the built-in tools'
	// routes, contributed to the api.
	{"internal/tools/", "internal/jobs", "internal/ops", "internal/api", "internal/builtins/resetroute", "internal/builtins/stripehook"},
	// The glue that opens a driver from the configuration and a River
	// client on it.
	{"internal/engine/drivers"},
	// The assembly.
	{"internal/app"},
	// The public root.
	{".", "builtins", "internal/builtins"},
	// Test kits and test infrastructure: above the assembly they drive.
	{"internal/toolkit", "gate/gatetest", "internal/oauth/oauthtest", "internal/core/coretest", "internal/store/storetest", "internal/pgtest", "internal/sqlitetest",
		"internal/enginetest", "internal/stripetest/", "internal/mailpit", "internal/smtptest"},
	// Harnesses and commands: on top, never imported by the product.
	{"internal/chaos/", "internal/model", "internal/failover", "cmd/", "examples/", "e2e/"},
}

// Graph maps each package (module-relative) to the module packages it
// imports, tests excluded.
type Graph map[string][]string

// Imports lists the module's import graph with go list.
func Imports(dir, module string) (Graph, error) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	g := Graph{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := rel(fields[0], module)
		g[pkg] = nil
		for _, imp := range fields[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				g[pkg] = append(g[pkg], rel(imp, module))
			}
		}
	}
	return g, nil
}

func rel(path, module string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// LayerOf returns pkg's layer, or -1 when Layers places it nowhere.
func LayerOf(pkg string) int {
	best, bestLen := -1, -1
	for i, layer := range Layers {
		for _, p := range layer {
			match := pkg == p || (strings.HasSuffix(p, "/") && (strings.HasPrefix(pkg, p) || pkg+"/" == p))
			if match && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

// CheckLayers returns one problem per package Layers does not place and
// per import from a lower layer to a higher one, sorted.
func CheckLayers(g Graph) []string {
	var problems []string
	for pkg, imps := range g {
		from := LayerOf(pkg)
		if from < 0 {
			problems = append(problems, fmt.Sprintf("%s: in no layer (add it to surface.Layers)", pkg))
			continue
		}
		for _, imp := range imps {
			to := LayerOf(imp)
			if to > from {
				problems = append(problems, fmt.Sprintf("%s (layer %d) imports %s (layer %d): a lower layer may not import a higher one", pkg, from, imp, to))
			}
		}
	}
	sort.Strings(problems)
	return problems
}
