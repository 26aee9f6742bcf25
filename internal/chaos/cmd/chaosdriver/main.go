// Command chaosdriver is the Go half of scripts/chaos.sh.
//
//	chaosdriver plan -seed S -duration D [-ops N] -out DIR
//	    writes DIR/seed.json (for idemctl seed) and DIR/plan.json
//	chaosdriver run -plan DIR/plan.json -api-bin BIN -stripe URL -mailpit URL \
//	    -worker-bin BIN -log-dir DIR -pg-restart-cmd CMD ...
//	    starts the api replicas (each behind a proxy of its own) and the
//	    workers, runs the load while killing workers and api replicas with
//	    SIGKILL and restarting Postgres once, waits for the drain, counts the
//	    effects and prints a Markdown table; exits 1 on any violation
//	chaosdriver scale -api-bin BIN -worker-bin BIN -database-url URL ...
//	    measures a closed-loop apply_credit load against deployments of
//	    N api replicas and M workers, one after the other, with CPU per
//	    operation of every process, and the commit rate of the same
//	    Postgres beside them (scripts/scale.sh); -write-seed FILE writes
//	    the seed file it needs
//
// The api replicas and the workers inherit the driver's environment
// (DATABASE_URL, STRIPE_API_BASE, SMTP_ADDR, IDEMGATE_*), which the script
// sets; each replica gets IDEMGATE_API_ADDR on a port of its own.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/chaos"
	"github.com/idemgate/idemgate/internal/stripetest"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: chaosdriver plan|run|scale [flags]")
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "plan":
		code = planCmd(os.Args[2:])
	case "run":
		code = runCmd(os.Args[2:])
	case "scale":
		code = scaleCmd(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "chaosdriver: unknown command %q (want plan, run or scale)\n", os.Args[1])
		code = 2
	}
	os.Exit(code)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chaosdriver: %s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func planCmd(args []string) int {
	fs := flag.NewFlagSet("plan", flag.ExitOnError)
	seed := fs.Int64("seed", 1, "random seed of the workload")
	duration := fs.Duration("duration", time.Minute, "load duration")
	ops := fs.Int("ops", 0, "operations (0: scale with -duration, 150 a minute)")
	out := fs.String("out", "", "directory to write seed.json and plan.json to")
	_ = fs.Parse(args)
	if *out == "" || *duration <= 0 || *ops < 0 {
		fmt.Fprintln(os.Stderr, "chaosdriver plan: -out is required; -duration must be positive and -ops not negative")
		return 2
	}
	n := *ops
	if n == 0 {
		n = chaos.DefaultOps(*duration)
	}
	p, seedFile := chaos.NewPlan(*seed, n, *duration)
	if err := chaos.WriteJSON(filepath.Join(*out, "seed.json"), seedFile); err != nil {
		fmt.Fprintln(os.Stderr, "chaosdriver plan:", err)
		return 1
	}
	if err := chaos.WriteJSON(filepath.Join(*out, "plan.json"), p); err != nil {
		fmt.Fprintln(os.Stderr, "chaosdriver plan:", err)
		return 1
	}
	counts := map[string]int{}
	for _, op := range p.Ops {
		counts[op.Tool]++
	}
	logf("planned %d operations over %s (seed %d): %v", n, *duration, *seed, counts)
	return 0
}

func runCmd(args []string) int {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var (
		planPath     = fs.String("plan", "", "plan.json written by chaosdriver plan")
		apiBin       = fs.String("api-bin", "", "cmd/api binary")
		nAPIs        = fs.Int("apis", 2, "api replicas, each behind a proxy of the driver's")
		apiKillEvery = fs.Duration("api-kill-every", 0, "mean interval between api replica kills (±25%); half of them hold an accepted answer and kill its replica before the client reads it; 0: none")
		apiPidFile   = fs.String("api-pid-file", "", "file that lists the running api replicas' pids")
		dbCountURL   = fs.String("count-database-url", "", "database to count rows in and find workers by (default: -database-url); a direct connection when the processes go through a pooler")
		stripeURL    = fs.String("stripe", "", "base URL of the test Stripe (its /_stats is read)")
		mailpitURL   = fs.String("mailpit", "", "base URL of Mailpit's API")
		smtpUpstream = fs.String("smtp-upstream", "", "Mailpit's SMTP host:port: the workers send through a proxy to it that can hold a stored mail's answer (targeted kills); empty: the workers use SMTP_ADDR directly")
		dbURL        = fs.String("database-url", os.Getenv("DATABASE_URL"), "database to count rows in")
		workerBin    = fs.String("worker-bin", "", "cmd/worker binary")
		nWorkers     = fs.Int("workers", 3, "worker processes")
		logDir       = fs.String("log-dir", ".", "directory for worker-N.log")
		pidFile      = fs.String("pid-file", "", "file that lists the running workers' pids")
		killEvery    = fs.Duration("kill-every", 4*time.Second, "mean interval between worker kills (±25%)")
		restartDelay = fs.Duration("restart-delay", 300*time.Millisecond, "pause between a kill and the replacement's start")
		pgRestart    = fs.String("pg-restart-cmd", "", "shell command that restarts Postgres (run once, mid-load); empty: none")
		pgRestartAt  = fs.Float64("pg-restart-at", 0.45, "when to restart Postgres, as a fraction of the load duration")
		drainTimeout = fs.Duration("drain-timeout", 120*time.Second, "deadline for every operation to be terminal after the load ended")
		settle       = fs.Duration("settle", 5*time.Second, "how long the workers keep running after the drain before counting, so that late effects show")
		concurrency  = fs.Int("concurrency", 32, "operations in flight at most")
		reportPath   = fs.String("report", "", "write per-operation results as JSON here")
		seed         = fs.Int64("seed", 0, "seed of the kill schedule and clients (default: the plan's)")
		slowAfter    = fs.Duration("slow-after", 10*time.Second, "list operations slower than this in the report's notes")
		whSecret     = fs.String("webhook-secret", "", "the api's IDEMGATE_STRIPE_WEBHOOK_SECRETS: the test Stripe sends signed webhooks to api-0 with it (empty: none)")
		whDup        = fs.Float64("webhook-duplicate-rate", 0.1, "with -webhook-secret: probability that an event is delivered twice")
		whReorder    = fs.Float64("webhook-reorder-rate", 0.1, "with -webhook-secret: probability that an event is held back and delivered after the next")
		whDrop       = fs.Float64("webhook-drop-rate", 0.05, "with -webhook-secret: probability that an event is never delivered")
	)
	_ = fs.Parse(args)
	if *planPath == "" || *apiBin == "" || *stripeURL == "" || *mailpitURL == "" || *workerBin == "" || *dbURL == "" || *nAPIs < 1 {
		fmt.Fprintln(os.Stderr, "chaosdriver run: -plan, -api-bin, -stripe, -mailpit, -worker-bin and -database-url (or DATABASE_URL) are required; -apis at least 1")
		return 2
	}
	if *dbCountURL == "" {
		*dbCountURL = *dbURL
	}
	plan, err := chaos.ReadPlan(*planPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosdriver run:", err)
		return 1
	}
	if *seed == 0 {
		*seed = plan.Seed
	}
	began := time.Now()
	rng := rand.New(rand.NewPCG(uint64(*seed), 0x6b696c6c)) // "kill"

	sigCtx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()

	pool, err := pgxpool.New(sigCtx, *dbCountURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosdriver run: -database-url:", err)
		return 2
	}
	defer pool.Close()
	stripeCtl := &chaos.StripeControl{Base: *stripeURL, HTTP: &http.Client{Timeout: time.Minute}}
	workers := &chaos.Workers{Bin: *workerBin, LogDir: *logDir, PidFile: *pidFile, Logf: logf}
	var smtp *chaos.SMTPProxy
	if *smtpUpstream != "" {
		if smtp, err = chaos.StartSMTPProxy(*smtpUpstream); err != nil {
			logf("SMTP proxy: %v", err)
			return 1
		}
		defer smtp.Close()
		workers.Env = append(workers.Env, "SMTP_ADDR="+smtp.Addr())
		logf("SMTP proxy %s -> Mailpit %s", smtp.Addr(), *smtpUpstream)
	}
	// The api replicas: each on a fixed port (a restarted replica takes it
	// again) behind a proxy of the driver's, which the clients call.
	apiAddrs := make([]string, *nAPIs)
	for i := range apiAddrs {
		if apiAddrs[i], err = freeAddr(); err != nil {
			logf("a port for api-%d: %v", i, err)
			return 1
		}
	}
	apis := &chaos.Workers{Bin: *apiBin, Name: "api", LogDir: *logDir, PidFile: *apiPidFile, Logf: logf,
		SlotEnv: func(i int) []string { return []string{"IDEMGATE_API_ADDR=" + apiAddrs[i]} }}
	holder := chaos.NewHolder()
	var proxies []*chaos.APIProxy
	var apiURLs []string
	for i, addr := range apiAddrs {
		p, err := chaos.StartAPIProxy(i, addr, holder)
		if err != nil {
			logf("proxy of api-%d: %v", i, err)
			return 1
		}
		defer p.Close()
		proxies = append(proxies, p)
		apiURLs = append(apiURLs, p.URL())
	}
	if err := apis.Start(*nAPIs); err != nil {
		logf("%v", err)
		apis.Stop(5 * time.Second)
		return 1
	}
	defer apis.Stop(15 * time.Second)
	if err := waitListening(sigCtx, apiAddrs, time.Minute); err != nil {
		logf("api replicas: %v", err)
		return 1
	}
	for i := range apiAddrs {
		logf("api-%d on http://%s, called through its proxy %s", i, apiAddrs[i], apiURLs[i])
	}
	if *whSecret != "" {
		// To api-0 directly: while it is killed, the test Stripe retries.
		url := "http://" + apiAddrs[0] + "/v1/webhooks/stripe"
		if err := stripeCtl.EnableWebhooks(sigCtx, &stripetest.WebhookConfig{URL: url, Secret: *whSecret, RefundEvents: true,
			DuplicateRate: *whDup, ReorderRate: *whReorder, DropRate: *whDrop, MaxAttempts: 10, Backoff: "500ms"}); err != nil {
			logf("webhooks: %v", err)
			return 1
		}
		logf("the test Stripe sends signed webhooks to %s (duplicate %v, reorder %v, drop %v)", url, *whDup, *whReorder, *whDrop)
	}
	if err := workers.Start(*nWorkers); err != nil {
		logf("%v", err)
		workers.Stop(5 * time.Second)
		return 1
	}
	defer workers.Stop(15 * time.Second)
	info := &chaos.RunInfo{Seed: *seed, Duration: plan.Duration, KillEvery: *killEvery, Workers: *nWorkers, DrainDeadline: *drainTimeout, SlowAfter: *slowAfter,
		APIs: *nAPIs, APIKillEvery: *apiKillEvery}

	// Clients may run until the load ends plus the drain deadline.
	clientCtx, cancelClients := context.WithTimeout(sigCtx, plan.Duration+*drainTimeout)
	defer cancelClients()

	// Chaos: kills at random intervals and one Postgres restart, until the
	// load ends.
	loadCtx, endLoad := context.WithCancel(clientCtx)
	var chaosWG sync.WaitGroup
	info.KillsByKind = map[string]int{}
	chaosWG.Add(1)
	go func() {
		defer chaosWG.Done()
		// Every fourth kill waits for a refund applied at the test Stripe,
		// every fourth for a mail stored by Mailpit, and kills the worker
		// that holds it; the others pick a worker at random.
		kinds := []string{"refund", "random", "mail", "random"}
		// Kills are due on a schedule (one per -kill-every on average), so
		// that the time a targeted kill waits for its effect does not
		// lower the rate: a targeted kill starts waiting half an interval
		// before it is due.
		due := time.Now()
		for k := 0; ; k++ {
			d := time.Duration(float64(*killEvery) * (0.75 + 0.5*rng.Float64()))
			// Behind schedule by more than half an interval: do not
			// catch up with a burst of kills.
			if due = due.Add(d); due.Before(time.Now().Add(-d / 2)) {
				due = time.Now()
			}
			kind, who, key := kinds[k%len(kinds)], "", ""
			if kind == "mail" && smtp == nil {
				kind = "random"
			}
			lead := time.Duration(0)
			if kind != "random" {
				lead = d / 2
			}
			if !sleepCtx(loadCtx, time.Until(due.Add(-lead))) {
				return
			}
			var killedAt time.Time
			var err error
			switch kind {
			case "refund":
				who, key, killedAt, err = killHoldingRefund(loadCtx, stripeCtl, pool, workers, d, *restartDelay)
			case "mail":
				who, key, killedAt, err = killHoldingMail(loadCtx, smtp, pool, workers, d, *restartDelay)
			}
			if err != nil {
				logf("targeted kill (%s): %v; killing a random worker instead", kind, err)
			}
			if who == "" {
				if loadCtx.Err() != nil {
					return
				}
				kind = "random"
				if who, err = workers.KillRandom(rng, *restartDelay); err != nil {
					logf("kill: %v", err)
					continue
				}
			}
			kills, _, _ := workers.Stats()
			info.KillsByKind[kind]++
			if key != "" {
				info.Targeted = append(info.Targeted, chaos.TargetedKill{Kind: kind, Key: key, At: killedAt})
			}
			what := ""
			switch kind {
			case "refund":
				what = " while the test Stripe held its applied refund " + key
			case "mail":
				what = " while the SMTP proxy held the 250 for its stored mail " + key
			}
			logf("kill #%d (%s): SIGKILL %s%s, replaced", kills, kind, who, what)
		}
	}()
	if *apiKillEvery > 0 {
		apiRng := rand.New(rand.NewPCG(uint64(*seed), 0x617069)) // "api"
		chaosWG.Add(1)
		go func() {
			defer chaosWG.Done()
			killAPIs(loadCtx, apiRng, apis, holder, *apiKillEvery, info)
		}()
	}
	if *pgRestart != "" {
		chaosWG.Add(1)
		go func() {
			defer chaosWG.Done()
			if !sleepCtx(loadCtx, time.Duration(float64(plan.Duration)**pgRestartAt)) {
				return
			}
			logf("restarting Postgres: %s", *pgRestart)
			start := time.Now()
			out, err := exec.Command("sh", "-c", *pgRestart).CombinedOutput()
			info.PGOutage = time.Since(start)
			info.PGRestarts++
			if err != nil {
				info.PGRestartErr = fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(out)))
				logf("Postgres restart failed: %s", info.PGRestartErr)
				return
			}
			logf("Postgres restarted in %s", info.PGOutage.Round(time.Millisecond))
		}()
	}

	client := chaos.NewClient(apiURLs, chaos.Token, *seed)
	dispatched := make(chan struct{})
	loadEnded := make(chan time.Time, 1)
	go func() {
		<-dispatched
		// Keep the chaos going until the planned load duration is over.
		sleepCtx(clientCtx, time.Until(began.Add(plan.Duration)))
		loadEnded <- time.Now()
		endLoad()
		if clientCtx.Err() == nil {
			logf("load over: %d operations dispatched; waiting for the drain (deadline %s)", len(plan.Ops), *drainTimeout)
		}
	}()
	apiKills := "no api kills"
	if *apiKillEvery > 0 {
		apiKills = fmt.Sprintf("an api kill every ~%s", *apiKillEvery)
	}
	logf("load: %d operations over %s, %d api replicas, %d workers, a worker kill every ~%s, %s",
		len(plan.Ops), plan.Duration, *nAPIs, *nWorkers, *killEvery, apiKills)
	results := client.Run(clientCtx, plan, *concurrency, dispatched)
	allDone := time.Now()
	loadEnd := <-loadEnded
	chaosWG.Wait()
	info.Drain = max(0, allDone.Sub(loadEnd))
	pending := 0
	for _, r := range results {
		if r.Status == "" {
			pending++
		}
	}
	info.DrainMissed = pending > 0
	if sigCtx.Err() != nil {
		logf("interrupted")
		return 130
	}
	logf("drain: %s after the load ended, %d operation(s) not terminal", info.Drain.Round(time.Millisecond), pending)

	// Let stale jobs and the reaper run against the settled state, so that a
	// late duplicate effect would be counted, then stop the workers.
	workers.WaitAllRunning(sigCtx)
	sleepCtx(sigCtx, *settle)
	workers.Stop(15 * time.Second)
	info.Kills, info.WorkerStarts, info.WorkerExits = workers.Stats()
	info.APIKills, info.APIStarts, info.APIExits = apis.Stats()
	for _, p := range proxies {
		st := p.Stats()
		info.Proxy.Refused += st.Refused
		info.Proxy.Cut += st.Cut
		info.Proxy.Held += st.Held
	}
	info.Elapsed = time.Since(began)

	if *reportPath != "" {
		if b, err := json.MarshalIndent(results, "", "  "); err == nil {
			_ = os.WriteFile(*reportPath, b, 0o644)
		}
	}
	checkCtx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if *whSecret != "" {
		// The api replicas still run: every webhook queued is delivered.
		if err := stripeCtl.FlushWebhooks(checkCtx); err != nil {
			logf("webhooks: %v", err)
			return 1
		}
	}
	rep, err := chaos.Check(checkCtx, chaos.Sources{DatabaseURL: *dbCountURL, StripeURL: *stripeURL, MailpitURL: *mailpitURL,
		Webhooks: *whSecret != ""}, info, results)
	if err != nil {
		logf("counting effects: %v", err)
		return 1
	}
	fmt.Println()
	rep.Markdown(os.Stdout)
	fmt.Println()
	if len(rep.Violations) > 0 {
		return 1
	}
	return 0
}

// killAPIs kills api replicas with SIGKILL until ctx ends, one every
// ~every (±25%), and restarts them. Every other kill (the first included)
// waits for a proxy to hold an accepted answer, kills the replica that
// gave it and only then drops the client's connection: the claim is
// committed and the client never heard of it. The others kill a replica at
// random, cutting whatever it was answering.
func killAPIs(ctx context.Context, rng *rand.Rand, apis *chaos.Workers, holder *chaos.Holder, every time.Duration, info *chaos.RunInfo) {
	const restartDelay = 500 * time.Millisecond
	info.APIKillsByKind = map[string]int{}
	due := time.Now()
	for k := 0; ; k++ {
		d := time.Duration(float64(every) * (0.75 + 0.5*rng.Float64()))
		if due = due.Add(d); due.Before(time.Now().Add(-d / 2)) {
			due = time.Now()
		}
		kind := "held"
		if k%2 == 1 {
			kind = "random"
		}
		lead := time.Duration(0)
		if kind == "held" {
			lead = d / 2
		}
		if !sleepCtx(ctx, time.Until(due.Add(-lead))) {
			return
		}
		var who string
		var err error
		if kind == "held" {
			if h := holder.Hold(ctx, d); h != nil {
				who, err = apis.KillSlot(h.Replica, restartDelay, h.Drop)
				h.Drop()
				if err == nil {
					info.HeldAnswers = append(info.HeldAnswers, chaos.HeldKill{Tool: h.Tool, Key: h.Key, OperationID: h.OperationID, Replica: h.Replica})
					info.APIKillsByKind[kind]++
					logf("api kill (held): SIGKILL %s after it committed %s key %s (operation %s) and before its client read the answer; replaced",
						who, h.Tool, h.Key, h.OperationID)
					continue
				}
				logf("api kill (held): %v", err)
			}
			if ctx.Err() != nil {
				return
			}
			kind = "random"
		}
		if who, err = apis.KillRandom(rng, restartDelay); err != nil {
			logf("api kill: %v", err)
			continue
		}
		info.APIKillsByKind[kind]++
		logf("api kill (random): SIGKILL %s, replaced", who)
	}
}

// freeAddr returns a free loopback host:port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening waits until every addr accepts connections.
func waitListening(ctx context.Context, addrs []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, a := range addrs {
		for {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s does not accept connections after %s: %v", a, timeout, err)
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
	return nil
}

// killHoldingRefund arms a hold at the test Stripe, waits for a refund to
// be applied, and kills the worker whose request it is. It returns the
// worker, the refund's downstream key and the kill's time; who is "" when
// no refund came in time or its worker was not found.
func killHoldingRefund(ctx context.Context, ctl *chaos.StripeControl, pool *pgxpool.Pool, w *chaos.Workers, wait, restartDelay time.Duration) (who, key string, at time.Time, err error) {
	defer func() { _ = ctl.Release(context.Background()) }()
	key, err = ctl.Hold(ctx, wait)
	if err != nil || key == "" {
		return "", "", at, err
	}
	return killOwner(ctx, pool, w, key, restartDelay)
}

// killHoldingMail is killHoldingRefund for a mail stored by Mailpit whose
// 250 the SMTP proxy holds.
func killHoldingMail(ctx context.Context, p *chaos.SMTPProxy, pool *pgxpool.Pool, w *chaos.Workers, wait, restartDelay time.Duration) (who, key string, at time.Time, err error) {
	msgID, release := p.Hold(ctx, wait)
	defer release()
	if msgID == "" {
		return "", "", at, nil
	}
	key, _, _ = strings.Cut(msgID, "@")
	return killOwner(ctx, pool, w, key, restartDelay)
}

func killOwner(ctx context.Context, pool *pgxpool.Pool, w *chaos.Workers, downstreamKey string, restartDelay time.Duration) (string, string, time.Time, error) {
	clientID, err := chaos.WorkerOf(ctx, pool, downstreamKey)
	if err != nil || clientID == "" {
		return "", "", time.Time{}, fmt.Errorf("finding the worker of %s: %v", downstreamKey, err)
	}
	at := time.Now()
	who, found, err := w.KillClient(clientID, restartDelay)
	if err != nil || !found {
		return "", "", time.Time{}, fmt.Errorf("no running worker has River client id %s (%v)", clientID, err)
	}
	return who, downstreamKey, at, nil
}

// sleepCtx sleeps d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no procfs: trust kill -0
	}
	// The state follows the command name in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
