package api

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestFastPathRunsOnlyWithTheCheckedSDKRelease(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"":                                   true, // a build that does not say: tests
		fastPathSDK:                          true,
		"v1.8.1":                             false, // the exact release, not its series
		"v1.8.0-rc.1":                        false,
		"v1.9.0":                             false,
		"v1.80.0":                            false,
		"v2.0.0":                             false,
		"v0.0.0-20270101000000-abcdefabcdef": false,
		"replaced by ../go-sdk ":             false,
	} {
		if got := sdkVerified(v); got != want {
			t.Errorf("sdkVerified(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestFastPathPinIsGoModsSDK: the byte-equality tests (mcpfast_test.go)
// run against go.mod's go-sdk, so the pin must be that version: a go.mod
// that moves to another release (or replaces the module) fails here until
// fastPathSDK is updated, with those tests run against the new release.
func TestFastPathPinIsGoModsSDK(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range pinProblems(string(b)) {
		t.Error(problem)
	}
	// The check itself, on go.mod files that must fail it.
	for name, gomod := range map[string]string{
		"another release":  "module m\n\nrequire (\n\tgithub.com/modelcontextprotocol/go-sdk v1.8.1\n)\n",
		"one-line require": "module m\nrequire github.com/modelcontextprotocol/go-sdk v1.9.0 // indirect\n",
		"replaced": "module m\nrequire github.com/modelcontextprotocol/go-sdk " + fastPathSDK +
			"\nreplace github.com/modelcontextprotocol/go-sdk => ../go-sdk\n",
		"not required": "module m\n",
	} {
		if len(pinProblems(gomod)) == 0 {
			t.Errorf("%s: pinProblems found nothing wrong in %q", name, gomod)
		}
	}
	if p := pinProblems("module m\nrequire (\n\tgithub.com/modelcontextprotocol/go-sdk " + fastPathSDK + "\n)\n"); len(p) != 0 {
		t.Errorf("pinProblems on a go.mod requiring %s: %v", fastPathSDK, p)
	}
}

// pinProblems returns what in the go.mod text gomod disagrees with
// fastPathSDK: the go-sdk required at another version, more than once or
// not at all, or replaced.
func pinProblems(gomod string) []string {
	const module = "github.com/modelcontextprotocol/go-sdk"
	var required, problems []string
	block := ""
	for _, line := range strings.Split(gomod, "\n") {
		line, _, _ = strings.Cut(line, "//")
		f := strings.Fields(line)
		kind := block
		switch {
		case len(f) == 0:
			continue
		case len(f) == 2 && f[1] == "(":
			block = f[0]
			continue
		case f[0] == ")":
			block = ""
			continue
		case block == "":
			kind, f = f[0], f[1:]
		}
		if len(f) == 0 || f[0] != module {
			continue
		}
		switch kind {
		case "require":
			if len(f) >= 2 {
				required = append(required, f[1])
			}
		case "replace":
			problems = append(problems, fmt.Sprintf("go.mod replaces %s (%s): the fast path runs only with the released %s",
				module, strings.TrimSpace(line), fastPathSDK))
		}
	}
	switch {
	case len(required) != 1:
		problems = append(problems, fmt.Sprintf("go.mod requires %s %d times (%v), want once", module, len(required), required))
	case required[0] != fastPathSDK:
		problems = append(problems, fmt.Sprintf("go.mod requires %s %s but the fast path is pinned to %s (api/mcpfast.go's fastPathSDK): "+
			"run mcpfast_test.go's byte-equality tests against %s, fix what differs, then move the pin",
			module, required[0], fastPathSDK, required[0]))
	}
	return problems
}
