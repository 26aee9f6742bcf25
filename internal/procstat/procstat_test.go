package procstat

import (
	"os"
	"strings"
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

func TestMachineBusyAndLoadAvg(t *testing.T) {
	// user, nice, system, idle, iowait, irq, softirq, steal
	a := []uint64{100, 0, 50, 800, 50, 0, 0, 0}
	b := []uint64{160, 0, 70, 860, 110, 0, 0, 0}
	require.InDelta(t, 0.4, MachineBusy(a, b), 1e-9, "80 busy of 200 ticks; iowait is idle")
	require.Zero(t, MachineBusy(nil, b))
	require.Len(t, strings.Fields(LoadAvg()), 3)
}
