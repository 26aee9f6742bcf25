package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/chaos"
	"github.com/idemgate/idemgate/internal/procstat"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
)

// The scale run (scripts/scale.sh): the same closed-loop load of
// apply_credit calls against several shapes of deployment, one after the
// other in one run, so that their ratios compare like with like on a
// shared machine; with CPU per operation from /proc for every process of
// the deployment, and the commit rate of the same Postgres measured beside
// them.

// scaleCustomers spreads the credits over this many customers, so that no
// balance row is hot.
const scaleCustomers = 200

// scaleSeed is the seed file of a scale run: the chaos tenant's token and
// the customers.
func scaleSeed() *store.SeedFile {
	rows := &tools.Seed{}
	f := &store.SeedFile{Rows: rows, Tokens: []store.SeedToken{{Tenant: chaos.Tenant, User: "scale-agent", Token: chaos.Token,
		Scopes: []string{"billing:credit", "operations:read"}}}}
	for c := range scaleCustomers {
		rows.Customers = append(rows.Customers, tools.SeedCustomer{Tenant: chaos.Tenant, CustomerID: fmt.Sprintf("cus_s%d", c), Currency: "usd"})
	}
	return f
}

type shape struct{ apis, workers int }

func (s shape) String() string {
	plural := func(n int, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	return plural(s.apis, "api replica") + " × " + plural(s.workers, "worker")
}

// scaleRow is one measured figure.
type scaleRow struct {
	What      string
	Shape     shape
	Ops       int
	Secs      float64
	P50, P99  time.Duration
	APICPU    time.Duration
	WorkerCPU time.Duration
	PGCPU     time.Duration
	PoolerCPU time.Duration
	ClientCPU time.Duration
	Commits   int64
	Busy      float64 // machine, fraction of all cores
}

func (r scaleRow) rate() float64 { return float64(r.Ops) / r.Secs }

func (r scaleRow) perOp(d time.Duration) string {
	if r.Ops == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000/float64(r.Ops))
}

func scaleCmd(args []string) int {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	var (
		writeSeed   = fs.String("write-seed", "", "write the seed file to this path and exit")
		apiBin      = fs.String("api-bin", "", "cmd/api binary")
		workerBin   = fs.String("worker-bin", "", "cmd/worker binary")
		logDir      = fs.String("log-dir", ".", "directory for the processes' logs")
		dbURL       = fs.String("database-url", os.Getenv("DATABASE_URL"), "direct Postgres URL: the commit probe, commit counts and Postgres's pid")
		shapesFlag  = fs.String("shapes", "1x1,1x2,1x4,2x1,2x2,2x4", "deployments to measure, APIsxWORKERS, in order")
		window      = fs.Duration("window", 12*time.Second, "measurement window per deployment")
		warmup      = fs.Duration("warmup", 3*time.Second, "load before each window, not measured")
		concurrency = fs.Int("concurrency", 32, "agents calling at once (closed loop)")
		probeConns  = fs.Int("probe-conns", 32, "connections of the commit probe")
		out         = fs.String("out", "", "also write the Markdown to this file")
		label       = fs.String("label", "", "what the deployments connect through, for the table")
		command     = fs.String("command", "scripts/scale.sh", "the command line to name in the table")
		poolerPid   = fs.Int("pooler-pid", 0, "pid of the connection pooler the deployments go through, whose CPU counts with theirs")
	)
	_ = fs.Parse(args)
	if *writeSeed != "" {
		if err := chaos.WriteJSON(*writeSeed, scaleSeed()); err != nil {
			fmt.Fprintln(os.Stderr, "chaosdriver scale:", err)
			return 1
		}
		return 0
	}
	if *apiBin == "" || *workerBin == "" || *dbURL == "" {
		fmt.Fprintln(os.Stderr, "chaosdriver scale: -api-bin, -worker-bin and -database-url (or DATABASE_URL) are required")
		return 2
	}
	var shapes []shape
	for _, s := range strings.Split(*shapesFlag, ",") {
		a, w, ok := strings.Cut(strings.TrimSpace(s), "x")
		na, err1 := strconv.Atoi(a)
		nw, err2 := strconv.Atoi(w)
		if !ok || err1 != nil || err2 != nil || na < 1 || nw < 1 {
			fmt.Fprintf(os.Stderr, "chaosdriver scale: -shapes: %q is not APIsxWORKERS\n", s)
			return 2
		}
		shapes = append(shapes, shape{na, nw})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	loadBefore := procstat.LoadAvg()

	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		logf("-database-url: %v", err)
		return 2
	}
	defer pool.Close()
	postmaster, err := postmasterPid(ctx, pool)
	if err != nil {
		logf("finding Postgres's pid (it must run on this machine): %v", err)
		return 1
	}
	var pgVersion string
	_ = pool.QueryRow(ctx, "SHOW server_version").Scan(&pgVersion)

	var rows []scaleRow
	probe, err := commitProbe(ctx, *dbURL, postmaster, *probeConns, *window)
	if err != nil {
		logf("commit probe: %v", err)
		return 1
	}
	logf("commit probe: %.0f commits/s on %d connections", probe.rate(), *probeConns)
	for _, sh := range shapes {
		if ctx.Err() != nil {
			return 130
		}
		r, err := measureShape(ctx, pool, postmaster, *poolerPid, sh, *apiBin, *workerBin, *logDir, *concurrency, *warmup, *window)
		if err != nil {
			logf("%s: %v", sh, err)
			return 1
		}
		logf("%s: %.0f ops/s, CPU ms/op api %s + workers %s + Postgres %s, %.1f transactions/op", sh, r.rate(),
			r.perOp(r.APICPU), r.perOp(r.WorkerCPU), r.perOp(r.PGCPU), float64(r.Commits)/float64(max(r.Ops, 1)))
		rows = append(rows, r)
	}

	var b bytes.Buffer
	through := "Postgres directly"
	if *label != "" {
		through = *label
	}
	fmt.Fprintf(&b, "- Command: `%s`\n", *command)
	fmt.Fprintf(&b, "- Date: %s; the run took %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), time.Since(began).Round(time.Second))
	fmt.Fprintf(&b, "- Machine: %d cores, linux/%s; the agents (this driver), the api replicas, the workers and Postgres share them. Load average before: %s; after: %s (other engineers' runs share these cores)\n",
		runtime.NumCPU(), runtime.GOARCH, loadBefore, procstat.LoadAvg())
	fmt.Fprintf(&b, "- Postgres %s, a throwaway cluster with fsync and synchronous_commit on; the deployments connect through %s\n", pgVersion, through)
	fmt.Fprintf(&b, "- Load: %d agents in a closed loop, each calling `apply_credit` with a new key over the REST twin (spread over the replicas) and waiting for the outcome (IDEMGATE_WAIT=2s, then polling); %s warm-up, then a %s window per deployment; every deployment starts fresh processes and drains before the next\n\n",
		*concurrency, *warmup, *window)
	cpuHead := "api + workers + Postgres"
	if *poolerPid > 0 {
		cpuHead += " + PgBouncer"
	}
	fmt.Fprintf(&b, "| deployment | ops/s | × 1 api replica × 1 worker | p50 · p99 | CPU ms/op: %s (+ agents) | Postgres transactions/op | machine busy |\n", cpuHead)
	fmt.Fprintln(&b, "|---|---:|---:|---|---|---:|---:|")
	fmt.Fprintf(&b, "| commit probe: one-row INSERT transactions on %d connections | %.0f commits/s | – | %s · %s | Postgres %s (+ probe %s) per commit | 1 | %.0f%% |\n",
		*probeConns, probe.rate(), fmtMS(probe.P50), fmtMS(probe.P99), probe.perOp(probe.PGCPU), probe.perOp(probe.ClientCPU), 100*probe.Busy)
	base := 0.0
	for _, r := range rows {
		if r.Shape == (shape{1, 1}) {
			base = r.rate()
		}
	}
	for _, r := range rows {
		ratio := "–"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", r.rate()/base)
		}
		total := r.APICPU + r.WorkerCPU + r.PGCPU + r.PoolerCPU
		parts := r.perOp(r.APICPU) + " + " + r.perOp(r.WorkerCPU) + " + " + r.perOp(r.PGCPU)
		if *poolerPid > 0 {
			parts += " + " + r.perOp(r.PoolerCPU)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s · %s | %s = **%s** (+ %s) | %.1f | %.0f%% |\n",
			r.Shape, r.rate(), ratio, fmtMS(r.P50), fmtMS(r.P99), parts,
			r.perOp(total), r.perOp(r.ClientCPU), float64(r.Commits)/float64(max(r.Ops, 1)), 100*r.Busy)
	}
	fmt.Println()
	fmt.Print(b.String())
	if *out != "" {
		if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
			logf("-out: %v", err)
			return 1
		}
	}
	return 0
}

func fmtMS(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// measureShape starts sh's processes, runs the load through warm-up and
// the window, drains and stops them.
func measureShape(ctx context.Context, pool *pgxpool.Pool, postmaster, poolerPid int, sh shape, apiBin, workerBin, logDir string,
	concurrency int, warmup, window time.Duration) (scaleRow, error) {
	row := scaleRow{What: sh.String(), Shape: sh}
	addrs := make([]string, sh.apis)
	for i := range addrs {
		var err error
		if addrs[i], err = freeAddr(); err != nil {
			return row, err
		}
	}
	name := fmt.Sprintf("scale-%dx%d", sh.apis, sh.workers)
	apis := &chaos.Workers{Bin: apiBin, Name: name + "-api", LogDir: logDir, Logf: logf,
		SlotEnv: func(i int) []string { return []string{"IDEMGATE_API_ADDR=" + addrs[i]} }}
	workers := &chaos.Workers{Bin: workerBin, Name: name + "-worker", LogDir: logDir, Logf: logf}
	defer workers.Stop(15 * time.Second)
	defer apis.Stop(15 * time.Second)
	if err := apis.Start(sh.apis); err != nil {
		return row, err
	}
	if err := workers.Start(sh.workers); err != nil {
		return row, err
	}
	if err := waitListening(ctx, addrs, time.Minute); err != nil {
		return row, err
	}
	var urls []string
	for _, a := range addrs {
		urls = append(urls, "http://"+a)
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var win measured
	var failures atomic.Int64
	var wg sync.WaitGroup
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = concurrency
	hc := &http.Client{Timeout: 30 * time.Second, Transport: tr}
	for g := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; loadCtx.Err() == nil; n++ {
				key := fmt.Sprintf("%s-%d-%d", name, g, n)
				body := fmt.Sprintf(`{"customer_id":"cus_s%d","amount_cents":%d,"currency":"usd"}`, (g*7919+n)%scaleCustomers, 1+n%500)
				start := time.Now()
				err := creditOnce(loadCtx, hc, urls[(g+n)%len(urls)], key, body)
				if loadCtx.Err() != nil {
					return
				}
				if err != nil {
					failures.Add(1)
					sleepCtx(loadCtx, 100*time.Millisecond)
					continue
				}
				win.record(start)
			}
		}()
	}
	sleepCtx(ctx, warmup)
	pids := func() map[string][]int {
		g := map[string][]int{"api": apis.Pids(), "worker": workers.Pids(), "pg": pgPids(postmaster)}
		if poolerPid > 0 {
			g["pooler"] = []int{poolerPid}
		}
		return g
	}
	before := snapCPU(ctx, pool, pids())
	win.measuring.Store(true)
	sleepCtx(ctx, window)
	win.measuring.Store(false)
	after := snapCPU(ctx, pool, pids())
	stopLoad()
	wg.Wait()
	if ctx.Err() != nil {
		return row, ctx.Err()
	}
	if n := failures.Load(); n > 0 {
		logf("%s: %d calls failed and were not counted (see %s)", sh, n, logDir)
	}
	row.Ops = len(win.lat)
	row.Secs = after.at.Sub(before.at).Seconds()
	row.APICPU = after.group["api"] - before.group["api"]
	row.WorkerCPU = after.group["worker"] - before.group["worker"]
	row.PGCPU = after.group["pg"] - before.group["pg"]
	row.PoolerCPU = after.group["pooler"] - before.group["pooler"]
	row.ClientCPU = after.self - before.self
	row.Commits = after.commits - before.commits
	row.Busy = procstat.MachineBusy(before.machine, after.machine)
	row.P50, row.P99 = win.percentiles()
	// Drain: what the window left queued is worked before the next
	// deployment starts.
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_claims WHERE status IN ('queued', 'running')`).Scan(&n); err != nil || n == 0 {
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return row, nil
}

// creditOnce calls apply_credit with key until its outcome is terminal.
func creditOnce(ctx context.Context, hc *http.Client, base, key, body string) error {
	post := func() (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tools/apply_credit", strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+chaos.Token)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		return doHTTP(hc, req)
	}
	status, b, err := post()
	if err != nil {
		return err
	}
	for {
		var a struct {
			Operation *struct {
				Status string `json:"status"`
			} `json:"operation"`
			Status string `json:"status"`
		}
		if status >= 300 && status != http.StatusAccepted && status != http.StatusConflict {
			return fmt.Errorf("answered %d: %.200s", status, b)
		}
		if json.Unmarshal(b, &a) != nil {
			return fmt.Errorf("answered %d: %.200s", status, b)
		}
		st := a.Status
		if a.Operation != nil {
			st = a.Operation.Status
		}
		if st == "succeeded" {
			return nil
		}
		if st == "failed" {
			return errors.New("the operation failed")
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/operations/apply_credit/"+key, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+chaos.Token)
		if status, b, err = doHTTP(hc, req); err != nil {
			return err
		}
	}
}

func doHTTP(hc *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// commitProbe measures the commit rate of the Postgres behind dbURL: conns
// connections each committing one-row INSERT transactions for window.
func commitProbe(ctx context.Context, dbURL string, postmaster, conns int, window time.Duration) (scaleRow, error) {
	row := scaleRow{What: "commit probe"}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return row, err
	}
	pc.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return row, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS scale_commit_probe;
		CREATE TABLE scale_commit_probe (id bigserial PRIMARY KEY, k text NOT NULL UNIQUE, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return row, err
	}
	defer func() { _, _ = pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS scale_commit_probe`) }()
	probeCtx, stop := context.WithCancel(ctx)
	defer stop()
	var win measured
	var wg sync.WaitGroup
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; probeCtx.Err() == nil; n++ {
				start := time.Now()
				if _, err := pool.Exec(probeCtx, `INSERT INTO scale_commit_probe (k) VALUES ($1)`, fmt.Sprintf("%d-%d", g, n)); err != nil {
					continue
				}
				win.record(start)
			}
		}()
	}
	sleepCtx(ctx, time.Second)
	pids := func() map[string][]int { return map[string][]int{"pg": pgPids(postmaster)} }
	before := snapCPU(ctx, pool, pids())
	win.measuring.Store(true)
	sleepCtx(ctx, window)
	win.measuring.Store(false)
	after := snapCPU(ctx, pool, pids())
	stop()
	wg.Wait()
	row.Ops = len(win.lat)
	row.Secs = after.at.Sub(before.at).Seconds()
	row.PGCPU = after.group["pg"] - before.group["pg"]
	row.ClientCPU = after.self - before.self
	row.Busy = procstat.MachineBusy(before.machine, after.machine)
	row.P50, row.P99 = win.percentiles()
	return row, ctx.Err()
}

// measured records the latencies of the operations that end while a
// measurement window is open (measuring).
type measured struct {
	measuring atomic.Bool
	mu        sync.Mutex
	lat       []time.Duration
}

// record counts an operation that started at start, if the window is open.
func (w *measured) record(start time.Time) {
	if !w.measuring.Load() {
		return
	}
	d := time.Since(start)
	w.mu.Lock()
	w.lat = append(w.lat, d)
	w.mu.Unlock()
}

// percentiles returns the window's p50 and p99 (zero when empty); call it
// after the loads stopped.
func (w *measured) percentiles() (p50, p99 time.Duration) {
	slices.Sort(w.lat)
	if len(w.lat) == 0 {
		return 0, 0
	}
	return w.lat[len(w.lat)/2], w.lat[len(w.lat)*99/100]
}

type cpuSnap struct {
	at      time.Time
	self    time.Duration
	group   map[string]time.Duration
	machine []uint64
	commits int64
}

// snapCPU reads the CPU time of every group of pids, of this process, of
// the machine, and the database's commit count.
func snapCPU(ctx context.Context, pool *pgxpool.Pool, groups map[string][]int) cpuSnap {
	s := cpuSnap{at: time.Now(), group: map[string]time.Duration{}}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for g, pids := range groups {
		for _, pid := range pids {
			s.group[g] += procCPU(pid)
		}
	}
	s.machine = procstat.MachineTicks()
	_ = pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&s.commits)
	return s
}

// postmasterPid returns the pid of the Postgres server, which must run on
// this machine: the parent of this connection's backend.
func postmasterPid(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var backend int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, err
	}
	ppid, err := procPPid(backend)
	if err != nil {
		return 0, fmt.Errorf("backend %d: %w", backend, err)
	}
	return ppid, nil
}

// pgPids returns the postmaster and its children.
func pgPids(postmaster int) []int {
	pids := []int{postmaster}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, err := procPPid(pid); err == nil && pp == postmaster {
			pids = append(pids, pid)
		}
	}
	return pids
}

func procPPid(pid int) (int, error) {
	f, err := procstat.Fields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[1])
}

// procCPU is a process's user and system time (USER_HZ = 100 ticks a
// second on Linux).
func procCPU(pid int) time.Duration {
	ticks, _ := procstat.CPUTicks(pid)
	return time.Duration(ticks) * 10 * time.Millisecond
}
