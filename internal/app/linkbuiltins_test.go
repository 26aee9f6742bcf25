package app_test

import (
	"os"
	"testing"

	"github.com/idemgate/idemgate/internal/builtins"
)

// TestMain links the built-in tools, as the binaries do before they load
// their configuration, and removes the commands the tests built.
func TestMain(m *testing.M) {
	builtins.Link()
	code := m.Run()
	removeBinaries()
	os.Exit(code)
}
