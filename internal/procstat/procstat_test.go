package procstat

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOwnProcessAndMachine(t *testing.T) {
	f, err := Fields(os.Getpid())
	require.NoError(t, err)
	require.Contains(t, "RSDTtZXIPW", f[0][:1], "field 3 is the state")
	_, ok := CPUTicks(os.Getpid())
	require.True(t, ok)
	require.Len(t, MachineTicks(), 8)
	_, err = Fields(-1)
	require.Error(t, err)
}
