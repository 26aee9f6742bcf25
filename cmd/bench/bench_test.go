package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/gate/gatetest"
	"github.com/idemgate/idemgate/internal/procstat"
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
	_, ok := procstat.CPUTicks(os.Getpid())
	require.True(t, ok)
	require.Len(t, procstat.MachineTicks(), 8)
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
	require.Equal(t, 5000, o.drainOps)

	o, err = parseFlags([]string{"-quick", "-claims", "5000"})
	require.NoError(t, err)
	require.Equal(t, []int{8, 32}, o.concs)
	require.Equal(t, 5000, o.claims)
	require.Equal(t, 1500*time.Millisecond, o.window)
	require.Equal(t, 1000, o.drainOps)

	_, err = parseFlags([]string{"-only", "nope"})
	require.Error(t, err)

	o, err = parseFlags([]string{"-only", "drain,stripe", "-stripe-url", "http://127.0.0.1:12111"})
	require.NoError(t, err)
	require.True(t, o.runs("drain") && o.runs("stripe"))
	require.False(t, o.runs("bare"))

	_, err = parseFlags([]string{"-only", "stripe", "-stripe-url", ""})
	require.ErrorContains(t, err, "STRIPE_MOCK_URL")
}

func TestWritePlotAndMarkdown(t *testing.T) {
	r := &runner{}
	for i, c := range []int{1, 8, 32, 64} {
		f := float64(i + 1)
		for s, rate := range map[string]float64{sCommit: 1500 * f, sBareInsert: 400 * f, sBareE2E: 350 * f, sIdemAccept: 200 * f,
			sIdemE2E: 150 * f, sMCPAccept: 120 * f, sMCPE2E: 110 * f, sReplay: 900 * f, sReplayMCP: 400 * f,
			sBareStripeInsert: 380 * f, sBareStripeE2E: 200 * f, sIdemStripeAccept: 190 * f, sIdemStripeE2E: 150 * f} {
			r.rows = append(r.rows, row{Series: s, Conc: c, N: 100, Rate: rate, CPU: cpuUsage{Seconds: 1, HarnessCores: 0.5, PGCores: 1}})
		}
	}
	r.rows = append(r.rows,
		row{Series: sBareDrain, Conc: drainFillConc, N: 5000, Rate: 500, Took: 10 * time.Second, CPU: cpuUsage{Seconds: 10, HarnessCores: 0.25, PGCores: 0.75}},
		row{Series: sIdemDrain, Conc: drainFillConc, N: 5000, Rate: 250, Took: 20 * time.Second, CPU: cpuUsage{Seconds: 20, HarnessCores: 0.25, PGCores: 0.75}})
	dir := t.TempDir()
	if out := os.Getenv("BENCH_PLOT_OUT"); out != "" {
		dir = out
	}
	for _, name := range []string{"plot.svg", "plot.png"} {
		require.NoError(t, r.writePlot(filepath.Join(dir, name), []int{1, 8, 32, 64}, "test"))
	}
	md := r.markdown(&runInfo{Concs: []int{1, 8, 32, 64}, PlotFile: "plot.svg", DrainOps: 5000, Tuning: tuning{MaxWorkers: 20}})
	require.Contains(t, md, "| 32 | idemgate in-process: end to end | 450 |")
	require.Contains(t, md, "end to end, idemgate in-process ≥ 1.0 × bare River")
	require.Contains(t, md, "| 32 | idemgate refund_order in-process: end to end | 450 | – | – | 0.75 |")
	require.Contains(t, md, "| external-effect tool (refund_order at the test Stripe) end to end ≥ 0.7 × bare River making the same Stripe call | c=1 0.75, c=8 0.75, c=32 0.75, c=64 0.75 | met at c=32 |")
	require.Contains(t, md, "| idemgate: drain (one worker process) | 5000 | 20000 ms | 250 | 0.50 | 1.00 + 3.00 |")
	require.Contains(t, md, "| one worker process drains a backlog ≥ 1.0 × bare River's drain (MaxWorkers 20) | 0.50 (5000 operations: 250 vs 500 ops/s; CPU ms/op 1.00 + 3.00 vs 0.50 + 1.50) | **missed** |")

	md = (&runner{}).markdown(&runInfo{Concs: []int{32}, StripeSkipped: true})
	require.Contains(t, md, "not measured: no test Stripe")
	require.NotContains(t, md, "### Drain")
}

func TestListenerPIDFindsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.Equal(t, os.Getpid(), listenerPID("http://"+ln.Addr().String()))
	require.Equal(t, 0, listenerPID("http://127.0.0.1"))
}
