package ops_test

import (
	"os"
	"testing"

	"github.com/idemgate/idemgate/internal/builtins"
)

// TestMain links the built-in tools, as the binaries do before they load
// their configuration.
func TestMain(m *testing.M) {
	builtins.Link()
	os.Exit(m.Run())
}
