package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/procstat"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The CPU the gate spends on a call before it reaches the database: decode
// once, fingerprint (RFC 8785 + sha256), canonicalize. `go test -bench .` in
// cmd/bench runs them; nothing here asserts a time.

var benchRaw = []byte(`{"customer_id":"cus_042","amount_cents":1250,"currency":"usd","memo":"goodwill credit for ticket 8812","idempotency_key":"0f3c9a1b2d4e5f60718293a4b5c6d7e8"}`)

func BenchmarkDecodeArgs(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := core.DecodeArgs(benchRaw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	args, err := core.DecodeArgs(benchRaw)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := core.Fingerprint(args, []string{"memo"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewIntent is the whole in-process cost of turning a call's raw
// arguments into an intent: decode, validate the key, fingerprint and
// canonicalize.
func BenchmarkNewIntent(b *testing.B) {
	g, err := core.New(&core.Config{Store: nilStore{}, Enqueuer: noEnqueuer{}, Policies: coretest.Policies()})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		args, err := core.DecodeArgs(benchRaw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := g.NewIntent("apply_credit", args); err != nil {
			b.Fatal(err)
		}
	}
}

// nilStore satisfies core.Store for NewIntent, which never touches it.
type nilStore struct{ core.Store }

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
			sBareStripeInsert: 380 * f, sBareStripeE2E: 200 * f, sIdemStripeAccept: 190 * f, sIdemStripeE2E: 150 * f,
			sPlainAccept: 240 * f, sPlainE2E: 220 * f} {
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

	require.Contains(t, md, "| 32 | 720 | 360 | 0.50 | 5.00 + 10.00 | 5.00 + 10.00 | 660 | 330 | 0.50 | 5.00 + 10.00 | 5.00 + 10.00 |")
	require.Contains(t, md, "| end to end over MCP, idemgate ahead of a plain MCP server doing InsertTx (≥ 1.0 ×) | c=1 0.50, c=8 0.50, c=32 0.50, c=64 0.50 | **missed** at c=32 |")

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

func TestLoneMarkdownComparesLikeConfigurations(t *testing.T) {
	t.Parallel()
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	tuned := loneConfig{Name: loneTuned, Idem: true}
	r := &runner{lones: []*loneResult{
		{Config: tuned, System: loneBare, Lat: ms(20, 20, 20, 260), QueueWait: ms(2, 2, 2, 240), Run: ms(1, 1, 1, 1), Rest: ms(17, 17, 17, 19)},
		{Config: tuned, System: loneIdem, Lat: ms(40, 40, 40, 260), QueueWait: ms(2, 2, 2, 240), Run: ms(2, 2, 2, 2), Rest: ms(36, 36, 36, 18),
			CPU: cpuUsage{Seconds: 1, HarnessCores: 0.4, PGCores: 0.2}},
	}}
	require.Equal(t, 80*time.Millisecond, mean(r.lones[0].Lat))
	require.Equal(t, 1, r.lones[1].polled())
	require.Equal(t, "1.19 / 2.00 / 1.00 / 1.00", loneRatios(r.lones[1], r.lones[0]))
	md := r.markdown(&runInfo{Concs: []int{32}})
	require.Contains(t, md, "| bench tuning | idemgate over MCP | 4 | 95.0 ms | 40.0 ms | 260 ms | 260 ms | 260 ms | 1.19 / 2.00 / 1.00 / 1.00 | 1 | 2.0 ms / 240 ms | 2.0 ms | 36.0 ms / 36.0 ms | – | 100.00 + 50.00 |")
	require.Contains(t, md, "| lone call over MCP, time to the outcome ≤ 2 × bare River's InsertTx to completed (bench tuning) | mean / p50 / p90 / p99: 1.19 / 2.00 / 1.00 / 1.00 (95.0 ms against 80.0 ms on the mean, 260 ms against 260 ms at p99) | met on the mean and p99 |")
}

func TestBreakdownSplitsByOutcomeAndSlowest(t *testing.T) {
	t.Parallel()
	var calls []callPhases
	for i := range 200 {
		out := vocab.OutcomeInFlight
		if i == 0 {
			out = vocab.OutcomeAccepted
		}
		d := time.Duration(i+1) * time.Millisecond
		calls = append(calls, callPhases{Outcome: out, Total: d, Server: i != 5, Before: d / 2, Handler: d / 4, After: d / 4, Mutation: d / 8})
	}
	groups := breakdown(calls)
	var names []string
	for _, g := range groups {
		names = append(names, g.Group)
	}
	require.Equal(t, []string{"all", "accepted", "in_flight", "slowest 1 %"}, names)
	all := groups[0]
	require.Equal(t, 200, all.Calls)
	require.Equal(t, 199, all.Matched)
	require.Equal(t, []int{99, 100, 1}, all.Histogram)
	require.Equal(t, "0–100 ms: 99 · 100–200 ms: 100 · 200–300 ms: 1", all.histogram())
	slow := groups[3]
	require.Equal(t, 2, slow.Calls)
	require.Equal(t, 199*time.Millisecond, slow.Total[0])
	require.Equal(t, "99.5 ms / 100 ms", pair(slow.Before))
	require.Equal(t, "–", pair(nil))
}

func TestPhaseRecorderTimesACallInTheHandler(t *testing.T) {
	t.Parallel()
	rec := newPhaseRecorder(4)
	logger := rec.logger(slog.New(slog.NewJSONHandler(io.Discard, nil))).With("component", "api")
	h := rec.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		logger.LogAttrs(r.Context(), slog.LevelInfo, "mutation", slog.Duration("duration", 3*time.Millisecond))
		_, _ = w.Write([]byte("{}"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	hc := httpClient(1)
	ctx := context.WithValue(context.Background(), benchCallKey{}, 2)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	t0 := time.Now()
	resp, err := hc.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t1 := time.Now()
	require.Eventually(t, func() bool { return rec.end[2].Load() != 0 }, time.Second, time.Millisecond)
	c := rec.phases(2, t0, t1, vocab.OutcomeInFlight)
	require.True(t, c.Server)
	require.Equal(t, 3*time.Millisecond, c.Mutation)
	require.GreaterOrEqual(t, c.Handler, 5*time.Millisecond)
	require.Equal(t, c.Total, c.Before+c.Handler+c.After)
	require.False(t, rec.phases(1, t0, t1, vocab.OutcomeInFlight).Server)
}

func TestRuntimeBetweenReadsSchedulingWaits(t *testing.T) {
	t.Parallel()
	buckets := []float64{0, 0.001, 0.01, 0.1, math.Inf(1)}
	a := runtimeSnap{sched: &metrics.Float64Histogram{Counts: []uint64{5, 0, 0, 0}, Buckets: buckets}, gcCPU: 1, allCPU: 10}
	b := runtimeSnap{sched: &metrics.Float64Histogram{Counts: []uint64{5, 90, 9, 1}, Buckets: buckets}, gcCPU: 2, allCPU: 14}
	u := runtimeBetween(a, b)
	require.True(t, u.Measured)
	require.Equal(t, uint64(100), u.Scheduled)
	// Bucket upper bounds; the last, unbounded, bucket reads as its lower.
	require.Equal(t, 10*time.Millisecond, u.SchedP50)
	require.Equal(t, 100*time.Millisecond, u.SchedP99)
	require.InDelta(t, 0.25, u.GCShare, 1e-9)
	require.False(t, runtimeBetween(runtimeSnap{}, b).Measured)
	require.NotNil(t, readRuntime().sched)
}

func TestStormMarkdownShowsWhereTheTimeGoes(t *testing.T) {
	t.Parallel()
	calls := []callPhases{
		{Outcome: vocab.OutcomeAccepted, Total: 150 * time.Millisecond, Server: true, Before: 10 * time.Millisecond, Handler: 120 * time.Millisecond, After: 20 * time.Millisecond, Mutation: 119 * time.Millisecond},
		{Outcome: vocab.OutcomeInFlight, Total: 250 * time.Millisecond, Server: true, Before: 150 * time.Millisecond, Handler: 60 * time.Millisecond, After: 40 * time.Millisecond, Mutation: 59 * time.Millisecond},
	}
	r := &runner{storms: []stormResult{{Via: "MCP", Calls: 2, Outcomes: map[vocab.Outcome]int{vocab.OutcomeAccepted: 1, vocab.OutcomeInFlight: 1},
		P50: 150 * time.Millisecond, P99: 250 * time.Millisecond, Effects: 1, AuditRows: 2, AuditCommits: 1, Breakdown: breakdown(calls),
		CPU: cpuUsage{Seconds: 0.25, HarnessCores: 1.6, PGCores: 0.4}, Runtime: runtimeUsage{Measured: true, Scheduled: 10, SchedP50: time.Microsecond, SchedP99: 50 * time.Millisecond, GCShare: 0.2},
		AuditBatches: []auditBatch{{Rows: 1, Start: 100 * time.Millisecond}, {Rows: 1, Start: 180 * time.Millisecond}}}}}
	md := r.markdown(&runInfo{Concs: []int{32}})
	require.Contains(t, md, "| 2 (1) |")
	require.Contains(t, md, "| 1 | MCP | in_flight 1 | 250 ms / 250 ms | 150 ms / 150 ms | 60.0 ms / 60.0 ms | 59.0 ms / 59.0 ms | 1.0 ms / 1.0 ms | 40.0 ms / 40.0 ms | 200–300 ms: 1 |")
	require.Contains(t, md, fmt.Sprintf("| 1 | MCP | 10 | < 0.01 ms / 50.0 ms | 20%% | %s | 250 ms | 1 @ 100 ms · 1 @ 180 ms |", fmtDur(time.Duration(0.5/float64(numCPU())*float64(time.Second)))))
}
