package idemgate_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/surface"
)

const module = "github.com/idemgate/idemgate"

// TestPublicSurface holds the public surface to a decision: the packages a
// user can import are exactly the card's (the root assembly, builtins,
// domain, gate with its test kit, jobs, migrations), their top-level names
// and exported methods stay within budget, and no public signature names an
// internal type. A new public package, or a leak, fails here first.
func TestPublicSurface(t *testing.T) {
	t.Parallel()
	paths, err := surface.PublicPackages(".")
	require.NoError(t, err)
	// builtins exports nothing: importing it links the built-in tools.
	require.Equal(t, []string{module, module + "/builtins", module + "/domain", module + "/gate", module + "/gate/gatetest",
		module + "/jobs", module + "/migrations"}, paths,
		"the public packages changed: decide, then update this list")
	require.LessOrEqual(t, len(paths), 7, "at most 7 importable packages")
	pkgs, err := surface.Measure(".", paths)
	require.NoError(t, err)
	declared, total := 0, 0
	for _, p := range pkgs {
		require.Empty(t, p.Leaks, "%s: exported names whose types are internal", p.Path)
		declared += p.Declared()
		total += len(p.Names)
		t.Logf("%s: %d top-level names and methods, %d with fields", p.Path, p.Declared(), len(p.Names))
	}
	t.Logf("total: %d top-level names and methods, %d with fields", declared, total)
	require.LessOrEqual(t, declared, 150, "the public surface (top-level names plus exported methods) grew past its budget")
}

// TestImportLayers refuses an import from a lower layer to a higher one
// (surface.Layers), and a package placed in no layer.
func TestImportLayers(t *testing.T) {
	t.Parallel()
	g, err := surface.Imports(".", module)
	require.NoError(t, err)
	require.NotEmpty(t, g["internal/core"], "the graph was read")
	require.Empty(t, surface.CheckLayers(g), "\n%s", strings.Join(surface.CheckLayers(g), "\n"))
}

// TestImportLayersRefuseABackEdge shows the check failing: the real graph
// with imports added from the core to the public gate API, from a leaf to
// the core, and from the engine drivers to the process configuration, the
// worker and the public API.
func TestImportLayersRefuseABackEdge(t *testing.T) {
	t.Parallel()
	g, err := surface.Imports(".", module)
	require.NoError(t, err)
	g["internal/core"] = append(g["internal/core"], "gate")
	g["internal/telemetry"] = append(g["internal/telemetry"], "internal/core")
	g["internal/engine/pgengine"] = append(g["internal/engine/pgengine"], "internal/config", "gate")
	g["internal/engine/sqliteengine"] = append(g["internal/engine/sqliteengine"], "internal/jobs")
	g["internal/newpkg"] = nil
	problems := surface.CheckLayers(g)
	require.Len(t, problems, 6, "%v", problems)
	require.Contains(t, problems[0], "internal/core (layer 2) imports gate (layer 8)")
	require.Contains(t, problems[1], "internal/engine/pgengine (layer 5) imports gate (layer 8)")
	require.Contains(t, problems[2], "internal/engine/pgengine (layer 5) imports internal/config (layer 6)")
	require.Contains(t, problems[3], "internal/engine/sqliteengine (layer 5) imports internal/jobs (layer 9)")
	require.Contains(t, problems[4], "internal/newpkg: in no layer")
	require.Contains(t, problems[5], "internal/telemetry (layer 0) imports internal/core (layer 2)")
}

// TestBuiltinsLinkedOnlyByImport: a service without the built-ins (the
// coupon and licenses examples) links neither them nor stripe-go nor the
// mailer; the binaries that import package builtins link all three.
func TestBuiltinsLinkedOnlyByImport(t *testing.T) {
	t.Parallel()
	heavy := []string{module + "/internal/tools", module + "/internal/builtins", "github.com/stripe/stripe-go/v76", "github.com/wneessen/go-mail"}
	deps := func(pkg string) map[string]bool {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		require.NoError(t, err, pkg)
		m := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			m[p] = true
		}
		return m
	}
	for _, pkg := range []string{"./examples/coupon", "./examples/licenses"} {
		d := deps(pkg)
		for _, h := range heavy {
			require.False(t, d[h], "%s links %s without importing package builtins", pkg, h)
		}
	}
	for _, pkg := range []string{"./cmd/api", "./cmd/worker", "./cmd/idemctl"} {
		d := deps(pkg)
		for _, h := range heavy {
			require.True(t, d[h], "%s does not link %s", pkg, h)
		}
	}
}
