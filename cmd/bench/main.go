// Command bench measures what the idempotency gate costs, side by side with
// bare River and the database's commit limit, in one run on Postgres:
//
//  1. the commit limit: claim-shaped one-row insert transactions per second;
//  2. bare River: one InsertTx transaction per operation, worked by a River
//     worker that runs apply_credit's domain statements (the currency
//     check, the ledger row with the balance) and completes the job with
//     JobCompleteTx in the same transaction;
//  3. idemgate: the same operations as apply_credit through the gate, in
//     process (core.Claim, the real jobs.Runner workers) and over MCP (the
//     real api handler, the official go-sdk client, Streamable HTTP);
//     beside it a plain go-sdk MCP server whose tool inserts bare River's
//     job with InsertTx (no idempotency), driven by the same client code;
//  4. replays of existing keys;
//  5. a storm of 1000 identical calls;
//  6. accepts with an empty claims table and with a million claims, and the
//     pruner's rate;
//  7. an external effect: refund_order against the test Stripe (stripe-mock)
//     end to end, beside bare River whose worker makes the same Stripe call;
//  8. a backlog drained by one worker process, idemgate's and bare River's;
//  9. lone calls: the time to the outcome of one call at a time, idemgate
//     over MCP (the call waits for its outcome) and bare River (InsertTx,
//     the job polled), in the quickstart's River configuration and the
//     bench's tuning.
//
// It prints Markdown, writes it into docs/benchmarks.md between markers and
// draws throughput against concurrency. scripts/bench.sh runs it; see
// docs/benchmarks.md for what the figures mean.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only with -pprof-addr
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/internal/builtins"
	"github.com/idemgate/idemgate/internal/procstat"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// defaultAdminURL is the server scripts/test.sh uses first.
const defaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

type options struct {
	quick       bool
	adminURL    string
	concs       []int
	window      time.Duration
	growthWin   time.Duration
	claims      int
	pruneRows   int
	replayKeys  int
	storms      int
	stormSize   int
	only        map[string]bool
	out         string
	plot        string
	write       bool
	profileDir  string
	pprofAddr   string
	command     string
	maxWorkers  int
	maxGroup    int
	apiConns    int
	workerConns int
	drainOps    int
	loneCalls   int
	stripeURL   string
}

// scenarios are the names -only accepts.
var scenarios = []string{"commit", "bare", "inproc", "mcp", "plain", "stripe", "drain", "replay", "storm", "lone", "growth"}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := &options{}
	var concs, only string
	fs.BoolVar(&o.quick, "quick", false, "short run for iteration (about a minute): c=8,32, 1.5s windows, 50k claims")
	fs.StringVar(&o.adminURL, "db", "", "admin database URL of the Postgres server (default $BENCH_DATABASE_URL, $TEST_DATABASE_URL, or "+defaultAdminURL+")")
	fs.StringVar(&concs, "conc", "", "concurrency levels, comma-separated (default 1,8,32,64; quick 8,32)")
	fs.DurationVar(&o.window, "window", 0, "measurement window of each throughput figure (default 8s, replays at most 5s; quick 1.5s)")
	fs.DurationVar(&o.growthWin, "growth-window", 0, "window of each growth figure (default 20s; quick 3s): long enough to see the accept rate settle after the checkpoint")
	fs.IntVar(&o.claims, "claims", 0, "claims loaded for the growth figure (default 1000000; quick 50000; 10000000 for the big run)")
	fs.IntVar(&o.pruneRows, "prune-rows", 0, "expired claims the pruner deletes (default 100000; quick 10000)")
	fs.IntVar(&o.replayKeys, "replay-keys", 0, "terminal claims the replay figures retry (default 2000; quick 200)")
	fs.IntVar(&o.storms, "storms", 0, "measured retry storms (default 3; quick 1)")
	fs.IntVar(&o.stormSize, "storm-size", 1000, "identical calls per storm")
	fs.StringVar(&only, "only", "", "run only these scenarios, comma-separated: "+strings.Join(scenarios, ","))
	fs.StringVar(&o.out, "out", "docs/benchmarks.md", "Markdown file whose generated section is replaced")
	fs.StringVar(&o.plot, "plot", "docs/benchmarks.svg", "plot of throughput against concurrency (.svg or .png)")
	fs.BoolVar(&o.write, "write", true, "write -out and -plot (false: print only)")
	fs.StringVar(&o.profileDir, "cpuprofile", "", "directory for a CPU profile of the harness per figure (go tool pprof)")
	fs.StringVar(&o.pprofAddr, "pprof-addr", "", "serve net/http/pprof on this loopback address while running (goroutine and block profiles)")
	fs.StringVar(&o.command, "command", "", "the command line to show in the report (scripts/bench.sh passes its own)")
	fs.IntVar(&o.maxWorkers, "max-workers", 20, "River MaxWorkers of the claim queue and of bare River's queue")
	fs.IntVar(&o.maxGroup, "max-group", 0, "idemgate's worker group commit size (0: the app's default; 1: no grouping)")
	fs.IntVar(&o.apiConns, "api-conns", 20, "pool of the inserting side (idemgate's api, bare River's inserter)")
	fs.IntVar(&o.workerConns, "worker-conns", 24, "pool of the worker side (idemgate's worker, bare River's worker)")
	fs.IntVar(&o.drainOps, "drain-ops", 0, "operations in the backlog one worker process drains (default 5000; quick 1000)")
	fs.IntVar(&o.loneCalls, "lone-calls", 0, "calls made one at a time per lone-call figure (default 200; quick 40; half of it for the spaced experiment)")
	fs.StringVar(&o.stripeURL, "stripe-url", os.Getenv("STRIPE_MOCK_URL"), "the test Stripe (stripe-mock) of the refund figures (default $STRIPE_MOCK_URL; scripts/bench.sh starts one); without it they are skipped")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	def := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if o.quick {
				*v = quick
			}
		}
	}
	def(&o.claims, 1_000_000, 50_000)
	def(&o.pruneRows, 100_000, 10_000)
	def(&o.replayKeys, 2000, 200)
	def(&o.storms, 3, 1)
	def(&o.drainOps, 5000, 1000)
	def(&o.loneCalls, 200, 40)
	if o.window == 0 {
		o.window = 8 * time.Second
		if o.quick {
			o.window = 1500 * time.Millisecond
		}
	}
	if o.growthWin == 0 {
		o.growthWin = 20 * time.Second
		if o.quick {
			o.growthWin = 3 * time.Second
		}
	}
	if concs == "" {
		concs = "1,8,32,64"
		if o.quick {
			concs = "8,32"
		}
	}
	for _, f := range strings.Split(concs, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return nil, fmt.Errorf("-conc: %q is not a positive integer", f)
		}
		o.concs = append(o.concs, c)
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(scenarios, s) {
				return nil, fmt.Errorf("-only: unknown scenario %q", s)
			}
			o.only[s] = true
		}
	}
	if o.only["stripe"] && o.stripeURL == "" {
		return nil, errors.New("-only stripe: no test Stripe: set -stripe-url or STRIPE_MOCK_URL (scripts/bench.sh starts stripe-mock)")
	}
	if o.adminURL == "" {
		o.adminURL = firstNonEmpty(os.Getenv("BENCH_DATABASE_URL"), os.Getenv("TEST_DATABASE_URL"), defaultAdminURL)
	}
	if o.command == "" {
		o.command = "cmd/bench " + strings.Join(args, " ")
	}
	return o, nil
}

func (o *options) runs(s string) bool { return o.only == nil || o.only[s] }

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func run() error {
	builtins.Link() // the built-in tools the scenarios run
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%6.1fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}

	if o.pprofAddr != "" {
		runtime.SetBlockProfileRate(int(time.Millisecond))
		runtime.SetMutexProfileFraction(10)
		go func() { _ = http.ListenAndServe(o.pprofAddr, nil) }()
	}
	srv, err := newDBServer(ctx, o.adminURL)
	if err != nil {
		return err
	}
	info := &runInfo{
		Command:    o.command,
		Started:    started,
		Machine:    machineInfo(),
		GoVersion:  runtime.Version(),
		LoadBefore: procstat.LoadAvg(),
		Tuning:     tuning{MaxWorkers: o.maxWorkers, MaxGroup: o.maxGroup, APIConns: int32(o.apiConns), WorkerConns: int32(o.workerConns)},
		Window:     o.window,
		Concs:      o.concs,
		DrainOps:   o.drainOps,
	}
	if info.Postgres, err = postgresInfo(ctx, o.adminURL); err != nil {
		return err
	}
	progress("machine: %s", info.Machine)
	progress("postgres: %s", info.Postgres)
	progress("load average: %s; tuning: %s", info.LoadBefore, info.Tuning)

	// The product logs every request at Info as JSON; so do we, into the
	// void, so that formatting costs what it costs in production.
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := &runner{srv: srv, tn: info.Tuning, logger: logger, d: o.window, profileDir: o.profileDir, progress: progress, stripeURL: o.stripeURL}
	if o.runs("stripe") && o.stripeURL == "" {
		progress("no test Stripe (STRIPE_MOCK_URL unset): the refund figures are skipped")
		info.StripeSkipped = true
	}

	// Levels are interleaved (every figure at c=1, then at c=8, …) so that
	// the ratios at one concurrency are measured minutes apart at most.
	for _, c := range o.concs {
		steps := []struct {
			name string
			fn   func() error
		}{
			{"commit", func() error { return r.commitLimit(ctx, c) }},
			{"bare", func() error { return r.e2eLevel(ctx, r.bareSpec(), c) }},
			{"inproc", func() error { return r.e2eLevel(ctx, r.idemSpec(), c) }},
			{"mcp", func() error { return r.e2eLevel(ctx, r.mcpSpec(), c) }},
			{"plain", func() error { return r.e2eLevel(ctx, r.plainSpec(), c) }},
			{"stripe", func() error { return r.stripeLevel(ctx, c) }},
		}
		for _, s := range steps {
			if !o.runs(s.name) || (s.name == "stripe" && o.stripeURL == "") {
				continue
			}
			if err := s.fn(); err != nil {
				return fmt.Errorf("%s at c=%d: %w", s.name, c, err)
			}
		}
	}
	if o.runs("drain") {
		if err := r.drain(ctx, o.drainOps); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	if o.runs("replay") {
		if err := r.replay(ctx, o.concs, o.replayKeys); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	if o.runs("storm") {
		if err := r.storm(ctx, o.storms, o.stormSize); err != nil {
			return fmt.Errorf("storm: %w", err)
		}
	}
	if o.runs("lone") {
		if err := r.lone(ctx, o.loneCalls); err != nil {
			return fmt.Errorf("lone calls: %w", err)
		}
	}
	if o.runs("growth") {
		if err := r.growth(ctx, o.claims, o.pruneRows, o.growthWin); err != nil {
			return fmt.Errorf("growth: %w", err)
		}
	}

	info.Took = time.Since(started)
	info.LoadAfter = procstat.LoadAvg()
	if o.write && o.plot != "" {
		rel, err := filepath.Rel(filepath.Dir(o.out), o.plot)
		if err != nil {
			rel = o.plot
		}
		info.PlotFile = rel
		title := fmt.Sprintf("idemgate vs bare River vs commit limit (%d cores, %s)", numCPU(), started.UTC().Format("2006-01-02"))
		if err := r.writePlot(o.plot, o.concs, title); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	md := r.markdown(info)
	fmt.Println(md)
	if o.write {
		if err := writeMarkdown(o.out, md); err != nil {
			return err
		}
		progress("wrote %s and %s", o.out, o.plot)
	}
	return nil
}

func machineInfo() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.Atoi(f[1])
				mem = fmt.Sprintf(", %d GiB memory", (kb+512*1024)>>20)
			}
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, %s/%s; client, api, workers and Postgres share them", numCPU(), model, mem, runtime.GOOS, runtime.GOARCH)
}

func postgresInfo(ctx context.Context, adminURL string) (string, error) {
	conn, err := connectAdmin(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return "", err
	}
	rows, err := conn.Query(ctx, `SELECT name, setting || coalesce(unit, '') FROM pg_settings
		WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method', 'commit_delay',
		               'shared_buffers', 'max_connections', 'autovacuum', 'max_wal_size')
		ORDER BY name`)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return "", err
		}
		parts = append(parts, k+"="+v)
	}
	return fmt.Sprintf("%s at %s (%s)", version, redact(adminURL), strings.Join(parts, ", ")), rows.Err()
}
