package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
)

// The CPU the gate spends on a call before it reaches the database: decode
// once, fingerprint (RFC 8785 + sha256), canonicalize. `go test -bench .` in
// cmd/bench runs them; nothing here asserts a time.

var benchRaw = []byte(`{"customer_id":"cus_042","amount_cents":1250,"currency":"usd","memo":"goodwill credit for ticket 8812","idempotency_key":"0f3c9a1b2d4e5f60718293a4b5c6d7e8"}`)

func BenchmarkDecodeArgs(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := gate.DecodeArgs(benchRaw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	args, err := gate.DecodeArgs(benchRaw)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := gate.Fingerprint(args, []string{"memo"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewIntent is the whole in-process cost of turning a call's raw
// arguments into an intent: decode, validate the key, fingerprint and
// canonicalize.
func BenchmarkNewIntent(b *testing.B) {
	g, err := gate.New(&gate.Config{Store: nilStore{}, Enqueuer: noEnqueuer{}, Policies: gatetest.Policies()})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		args, err := gate.DecodeArgs(benchRaw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := g.NewIntent("apply_credit", args); err != nil {
			b.Fatal(err)
		}
	}
}

// nilStore satisfies gate.Store for NewIntent, which never touches it.
type nilStore struct{ gate.Store }

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, percentile(lat, 50))
	require.Equal(t, 99*time.Millisecond, percentile(lat, 99))
	require.Equal(t, 100*time.Millisecond, percentile(lat, 100))
	require.Equal(t, time.Millisecond, percentile(lat, 0.1))
	require.Equal(t, time.Duration(0), percentile(nil, 99))
}

func TestParseLSN(t *testing.T) {
	require.Equal(t, uint64(0x1_0000_0010), parseLSN("1/10"))
	require.Equal(t, uint64(0), parseLSN("garbage"))
}

func TestProcTicksReadsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	_, ok := procTicks(os.Getpid())
	require.True(t, ok)
	require.Len(t, machineTicks(), 8)
}

func TestUsageComputesCoresAndShares(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuSnap{at: t0, self: 0, pg: map[int]uint64{1: 100, 2: 50}, machine: []uint64{100, 0, 50, 800, 50, 0, 0, 0}, walLSN: 10}
	b := cpuSnap{at: t0.Add(2 * time.Second), self: time.Second, pg: map[int]uint64{1: 200, 3: 100},
		machine: []uint64{200, 0, 100, 900, 100, 0, 0, 0}, walLSN: 110}
	u := usage(a, b)
	require.InDelta(t, 0.5, u.HarnessCores, 1e-9)
	// pid 1: 100 ticks, pid 3 (new): 100 ticks, pid 2 (gone): lost.
	require.InDelta(t, 1.0, u.PGCores, 1e-9)
	require.InDelta(t, 150.0/300, u.MachineBusy, 1e-9)
	require.InDelta(t, 50.0/300, u.MachineSys, 1e-9)
	require.InDelta(t, 50.0/300, u.MachineIO, 1e-9)
	require.Equal(t, uint64(100), u.WALBytes)
}

func TestWriteMarkdownKeepsTextOutsideTheMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	require.NoError(t, writeMarkdown(path, "first\n"))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), beginMarker+"\nfirst\n"+endMarker)

	doc := "# Title\n\nanalysis above\n\n" + beginMarker + "\nold\n" + endMarker + "\n\nproposals below\n"
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))
	require.NoError(t, writeMarkdown(path, "new\n"))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	got := string(b)
	require.True(t, strings.HasPrefix(got, "# Title\n\nanalysis above\n\n"+beginMarker+"\nnew\n"+endMarker+"\n"), got)
	require.True(t, strings.HasSuffix(got, "\nproposals below\n"), got)
	require.NotContains(t, got, "old")
}

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, []int{1, 8, 32, 64}, o.concs)
	require.Equal(t, 1_000_000, o.claims)
	require.Equal(t, 8*time.Second, o.window)

	o, err = parseFlags([]string{"-quick", "-claims", "5000"})
	require.NoError(t, err)
	require.Equal(t, []int{8, 32}, o.concs)
	require.Equal(t, 5000, o.claims)
	require.Equal(t, 1500*time.Millisecond, o.window)

	_, err = parseFlags([]string{"-only", "nope"})
	require.Error(t, err)
}

func TestWritePlotAndMarkdown(t *testing.T) {
	r := &runner{}
	for i, c := range []int{1, 8, 32, 64} {
		f := float64(i + 1)
		for s, rate := range map[string]float64{sCommit: 1500 * f, sBareInsert: 400 * f, sBareE2E: 350 * f, sIdemAccept: 200 * f,
			sIdemE2E: 150 * f, sMCPAccept: 120 * f, sMCPE2E: 110 * f, sReplay: 900 * f, sReplayMCP: 400 * f} {
			r.rows = append(r.rows, row{Series: s, Conc: c, N: 100, Rate: rate, CPU: cpuUsage{Seconds: 1, HarnessCores: 0.5, PGCores: 1}})
		}
	}
	dir := t.TempDir()
	if out := os.Getenv("BENCH_PLOT_OUT"); out != "" {
		dir = out
	}
	for _, name := range []string{"plot.svg", "plot.png"} {
		require.NoError(t, r.writePlot(filepath.Join(dir, name), []int{1, 8, 32, 64}, "test"))
	}
	md := r.markdown(&runInfo{Concs: []int{1, 8, 32, 64}, PlotFile: "plot.svg"})
	require.Contains(t, md, "| 32 | idemgate in-process: end to end | 450 |")
	require.Contains(t, md, "end to end, idemgate in-process ≥ 1.0 × bare River")
}
