package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/vocab"
)

// --- where a storm's time goes ---

// benchCallKey carries a storm call's index in its client context (the
// bearer transport sends it as callHeader) and in the server's request
// context (phaseRecorder's middleware puts it there).
type benchCallKey struct{}

// callHeader names a storm call's index on the wire.
const callHeader = "X-Bench-Call"

// phaseRecorder times each call of a storm inside the api process, from
// outside the service: its middleware, in front of the api's handler, sees
// when the handler got the request (net/http has read its headers) and
// when it returned; its log handler reads the duration of the api's own
// "mutation" line (from the scope check through the gate to the answer,
// after authentication and the MCP decoding). Times are nanoseconds since
// base, in atomics: the client may see its answer before the handler
// returns.
type phaseRecorder struct {
	base                            time.Time
	start, end, mutation, seenCalls []atomic.Int64
}

func newPhaseRecorder(size int) *phaseRecorder {
	return &phaseRecorder{base: time.Now(), start: make([]atomic.Int64, size), end: make([]atomic.Int64, size),
		mutation: make([]atomic.Int64, size), seenCalls: make([]atomic.Int64, size)}
}

// reset forgets the last storm.
func (p *phaseRecorder) reset() {
	for i := range p.start {
		p.start[i].Store(0)
		p.end[i].Store(0)
		p.mutation[i].Store(0)
		p.seenCalls[i].Store(0)
	}
}

func (p *phaseRecorder) since() int64 { return int64(time.Since(p.base)) }

// index returns the storm call of r, or -1.
func (p *phaseRecorder) index(v string) int {
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 || i >= len(p.start) {
		return -1
	}
	return i
}

// middleware wraps the api's handler.
func (p *phaseRecorder) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := p.index(r.Header.Get(callHeader))
		if i < 0 {
			next.ServeHTTP(w, r)
			return
		}
		p.start[i].Store(p.since())
		p.seenCalls[i].Add(1)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), benchCallKey{}, i)))
		p.end[i].Store(p.since())
	})
}

// logger is base with the mutation lines' durations recorded.
func (p *phaseRecorder) logger(base *slog.Logger) *slog.Logger {
	return slog.New(&phaseLog{Handler: base.Handler(), p: p})
}

// phaseLog is a slog.Handler that records the "mutation" line's duration
// of a storm call, then hands every record on.
type phaseLog struct {
	slog.Handler
	p *phaseRecorder
}

func (h *phaseLog) Handle(ctx context.Context, rec slog.Record) error {
	if i, ok := ctx.Value(benchCallKey{}).(int); ok && rec.Message == "mutation" {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "duration" && a.Value.Kind() == slog.KindDuration {
				h.p.mutation[i].Store(int64(a.Value.Duration()))
				return false
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, rec)
}

func (h *phaseLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &phaseLog{Handler: h.Handler.WithAttrs(attrs), p: h.p}
}

func (h *phaseLog) WithGroup(name string) slog.Handler {
	return &phaseLog{Handler: h.Handler.WithGroup(name), p: h.p}
}

// callPhases is one storm call, split where it was measured.
type callPhases struct {
	Outcome vocab.Outcome
	Total   time.Duration
	// Server: the handler saw the call once (no transport retry); then
	// Before (release to the handler: the client's encoding, the
	// connection, net/http reading the request, waiting for a core),
	// Handler (authentication, the MCP or REST decoding, the mutation,
	// the answer's encoding and write) and After (the answer's way back
	// and the client's decoding).
	Server                 bool
	Before, Handler, After time.Duration
	// Mutation is the api's own mutation time, within Handler; 0 when its
	// log line was not matched.
	Mutation time.Duration
}

// phases returns call i's split, released at t0 (ns since base) and
// answered at t1.
func (p *phaseRecorder) phases(i int, t0, t1 time.Time, outcome vocab.Outcome) callPhases {
	c := callPhases{Outcome: outcome, Total: t1.Sub(t0)}
	s, e := p.start[i].Load(), p.end[i].Load()
	if p.seenCalls[i].Load() != 1 || s == 0 || e == 0 {
		return c
	}
	ts, te := p.base.Add(time.Duration(s)), p.base.Add(time.Duration(e))
	c.Server = true
	c.Before, c.Handler, c.After = max(ts.Sub(t0), 0), max(te.Sub(ts), 0), max(t1.Sub(te), 0)
	c.Mutation = time.Duration(p.mutation[i].Load())
	return c
}

// stormBreakdown summarizes a storm's calls per outcome, and its slowest
// 1 %.
type stormBreakdown struct {
	Group                                   string // an outcome, "all", or "slowest 1 %"
	Calls                                   int
	Matched                                 int // calls with server times
	Total                                   []time.Duration
	Before, Handler, Other, Mutation, After []time.Duration
	// Histogram counts Total in 100 ms buckets.
	Histogram []int
}

const stormBucket = 100 * time.Millisecond

func breakdown(calls []callPhases) []*stormBreakdown {
	groups := map[string]*stormBreakdown{}
	var order []string
	add := func(name string, c callPhases) {
		g := groups[name]
		if g == nil {
			g = &stormBreakdown{Group: name}
			groups[name] = g
			order = append(order, name)
		}
		g.Calls++
		g.Total = append(g.Total, c.Total)
		b := int(c.Total / stormBucket)
		for len(g.Histogram) <= b {
			g.Histogram = append(g.Histogram, 0)
		}
		g.Histogram[b]++
		if !c.Server {
			return
		}
		g.Matched++
		g.Before = append(g.Before, c.Before)
		g.Handler = append(g.Handler, c.Handler)
		g.After = append(g.After, c.After)
		if c.Mutation > 0 {
			g.Mutation = append(g.Mutation, c.Mutation)
			g.Other = append(g.Other, max(c.Handler-c.Mutation, 0))
		}
	}
	sorted := slices.Clone(calls)
	slices.SortFunc(sorted, func(a, b callPhases) int { return int(a.Total - b.Total) })
	for _, c := range sorted {
		add("all", c)
	}
	outs := []vocab.Outcome{}
	for _, c := range sorted {
		if !slices.Contains(outs, c.Outcome) {
			outs = append(outs, c.Outcome)
		}
	}
	slices.Sort(outs)
	for _, o := range outs {
		for _, c := range sorted {
			if c.Outcome == o {
				add(string(o), c)
			}
		}
	}
	slow := max(len(sorted)/100, 1)
	for _, c := range sorted[len(sorted)-slow:] {
		add("slowest 1 %", c)
	}
	out := make([]*stormBreakdown, 0, len(order))
	for _, name := range order {
		out = append(out, groups[name])
	}
	return out
}

// pair is "p50 / p99" of lat.
func pair(lat []time.Duration) string {
	if len(lat) == 0 {
		return "–"
	}
	return fmtDur(percentile(lat, 50)) + " / " + fmtDur(percentile(lat, 99))
}

// histogram is counts per 100 ms bucket, "0–100 ms 12 · 100–200 ms 300 …",
// empty buckets left out.
func (g *stormBreakdown) histogram() string {
	var parts []string
	for b, n := range g.Histogram {
		if n == 0 {
			continue
		}
		lo, hi := time.Duration(b)*stormBucket, time.Duration(b+1)*stormBucket
		parts = append(parts, fmt.Sprintf("%d–%d ms: %d", lo.Milliseconds(), hi.Milliseconds(), n))
	}
	return strings.Join(parts, " · ")
}

// runtimeSnap is the Go runtime's scheduling latencies and CPU classes
// (runtime/metrics) at one instant.
type runtimeSnap struct {
	sched         *metrics.Float64Histogram
	gcCPU, allCPU float64
}

var runtimeMetrics = []string{"/sched/latencies:seconds", "/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/total:cpu-seconds"}

func readRuntime() runtimeSnap {
	samples := make([]metrics.Sample, len(runtimeMetrics))
	for i, name := range runtimeMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var s runtimeSnap
	if samples[0].Value.Kind() == metrics.KindFloat64Histogram {
		h := samples[0].Value.Float64Histogram()
		s.sched = &metrics.Float64Histogram{Counts: slices.Clone(h.Counts), Buckets: h.Buckets}
	}
	if samples[1].Value.Kind() == metrics.KindFloat64 {
		s.gcCPU = samples[1].Value.Float64()
	}
	if samples[2].Value.Kind() == metrics.KindFloat64 {
		s.allCPU = samples[2].Value.Float64()
	}
	return s
}

// runtimeUsage is the Go runtime between two snapshots: how long
// goroutines waited, runnable, for a core (the scheduling latencies'
// percentiles, each its bucket's upper bound), and GC's share of the
// process's CPU (runtime/metrics' estimate).
type runtimeUsage struct {
	Scheduled uint64 // goroutine runs in the window
	SchedP50  time.Duration
	SchedP99  time.Duration
	GCShare   float64
	Measured  bool
}

func runtimeBetween(a, b runtimeSnap) runtimeUsage {
	var u runtimeUsage
	if a.sched == nil || b.sched == nil || len(a.sched.Counts) != len(b.sched.Counts) {
		return u
	}
	delta := make([]uint64, len(b.sched.Counts))
	for i := range delta {
		delta[i] = b.sched.Counts[i] - a.sched.Counts[i]
		u.Scheduled += delta[i]
	}
	if u.Scheduled == 0 {
		return u
	}
	u.Measured = true
	quantile := func(q float64) time.Duration {
		want := uint64(q * float64(u.Scheduled))
		var n uint64
		for i, c := range delta {
			n += c
			if n > want {
				up := b.sched.Buckets[i+1]
				if math.IsInf(up, 1) {
					up = b.sched.Buckets[i]
				}
				return time.Duration(up * float64(time.Second))
			}
		}
		return 0
	}
	u.SchedP50, u.SchedP99 = quantile(0.5), quantile(0.99)
	if cpu := b.allCPU - a.allCPU; cpu > 0 {
		u.GCShare = (b.gcCPU - a.gcCPU) / cpu
	}
	return u
}
