package app_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// binaries are the product's commands built once per test process, by
// package path (without -race: they are the product under test, not this
// test's code).
var binaries = struct {
	sync.Mutex
	built map[string]*binary
}{built: map[string]*binary{}}

type binary struct {
	once sync.Once
	dir  string // the temporary directory it was built in
	path string
	err  error
}

// removeBinaries removes the directories of every command built (TestMain,
// once the tests ended): each build is tens of megabytes.
func removeBinaries() {
	binaries.Lock()
	defer binaries.Unlock()
	for _, b := range binaries.built {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	}
}

// buildBinary builds the command in ../cmd/name once and returns its path.
func buildBinary(t *testing.T, name string) string {
	t.Helper()
	binaries.Lock()
	b, ok := binaries.built[name]
	if !ok {
		b = &binary{}
		binaries.built[name] = b
	}
	binaries.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "idemgate-"+name+"-bin")
		if err != nil {
			b.err = err
			return
		}
		b.dir = dir
		b.path = filepath.Join(dir, name)
		out, err := exec.Command("go", "build", "-o", b.path, "../../cmd/"+name).CombinedOutput()
		if err != nil {
			b.err = err
			t.Logf("go build: %s", out)
		}
	})
	require.NoError(t, b.err)
	return b.path
}

// buildAPI builds cmd/api once per test process.
func buildAPI(t *testing.T) string { return buildBinary(t, "api") }

// buildWorker builds cmd/worker once per test process.
func buildWorker(t *testing.T) string { return buildBinary(t, "worker") }
