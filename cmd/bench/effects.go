package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/stripe/stripe-go/v76"

	"github.com/idemgate/idemgate/internal/vocab"
)

// --- 7. an external effect: refunds at the test Stripe ---

// process is a process beside the harness whose CPU a figure reports.
type process struct {
	pid  int
	name string
}

// listenerPID returns the process listening on rawURL's TCP port (one of
// this user's: /proc shows only their descriptors), or 0 when none is
// found. It matches the listening socket's inode in /proc/net/tcp{,6}
// against every process's file descriptors.
func listenerPID(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0
	}
	inode := ""
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			fs := strings.Fields(l)
			if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			if v, err := strconv.ParseUint(hexPort, 16, 32); err == nil && int(v) == port {
				inode = fs[9]
			}
		}
	}
	if inode == "" {
		return 0
	}
	target := "socket:[" + inode + "]"
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir("/proc/" + p.Name() + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, _ := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); l == target {
				return pid
			}
		}
	}
	return 0
}

// bareStripeSpec is bare River whose worker makes refund_order's Stripe
// call (bareRefundWorker) and records the refund row with JobCompleteTx.
func (r *runner) bareStripeSpec() e2eSpec {
	return e2eSpec{accept: sBareStripeInsert, e2e: sBareStripeE2E, effects: refundTable, downstream: r.stripeProcess(),
		start: func(ctx context.Context, db *benchDB, _ int) (func(context.Context, int, int) error, func(), error) {
			s, err := startBare(ctx, db, r.tn, r.logger, bareOptions{stripeBase: r.stripeURL})
			if err != nil {
				return nil, nil, err
			}
			op := func(ctx context.Context, _, _ int) error {
				order, amount, _ := refundArgs("")
				return s.insert(ctx, bareRefundArgs{TenantID: benchTenant, OrderID: order, AmountCents: amount, Key: randomKey()})
			}
			return op, s.stop, nil
		}}
}

// idemStripeSpec is refund_order through the gate in process, worked by
// app.NewWorker against the test Stripe.
func (r *runner) idemStripeSpec() e2eSpec {
	return r.inProcessSpec(e2eSpec{accept: sIdemStripeAccept, e2e: sIdemStripeE2E, effects: refundTable, downstream: r.stripeProcess()},
		"refund_order", stackOptions{stripeBase: r.stripeURL},
		func(key string) []byte { _, _, raw := refundArgs(key); return raw })
}

// stripeWindow bounds the refund figures' window: their workers are slower
// than the accepts, so a window of w leaves a backlog of about another w to
// drain, and the full run must stay under ten minutes.
const stripeWindow = 5 * time.Second

// stripeLevel measures both refund figures at concurrency c, bare River
// first, as the other levels do.
func (r *runner) stripeLevel(ctx context.Context, c int) error {
	if err := r.checkStripe(ctx); err != nil {
		return err
	}
	for _, spec := range []e2eSpec{r.bareStripeSpec(), r.idemStripeSpec()} {
		accept, e2e, _, err := r.runE2EWindow(ctx, nil, c, spec, false, min(r.d, stripeWindow), true)
		if err != nil {
			return err
		}
		r.add(*accept)
		r.add(*e2e)
	}
	return nil
}

// stripeProcess is the test Stripe's process, when found on this machine.
func (r *runner) stripeProcess() process {
	return process{pid: r.stripePID, name: "stripe-mock"}
}

// checkStripe makes one refund at the test Stripe, once per run, so that a
// wrong address fails the run at once instead of after a drain's timeout.
func (r *runner) checkStripe(ctx context.Context) error {
	r.stripeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := newStripeRefunds(r.stripeURL).New(&stripe.RefundParams{
			Params: stripe.Params{Context: ctx, IdempotencyKey: stripe.String("bench-check-" + uuid.NewString())},
			Charge: stripe.String("ch_bench_000"),
			Amount: stripe.Int64(100),
		})
		if err != nil {
			r.stripeErr = fmt.Errorf("the test Stripe at %s does not make refunds: %w", r.stripeURL, err)
			return
		}
		if r.stripePID = listenerPID(r.stripeURL); r.stripePID == 0 {
			r.progress("the test Stripe's process was not found: its CPU is not reported")
		}
	})
	return r.stripeErr
}

// --- 8. drain: a backlog worked by one worker process ---

// drainFillConc is the concurrency at which a drain's backlog is accepted.
const drainFillConc = 32

// drainSpec is one system's drain.
type drainSpec struct {
	series string
	// prepare accepts n operations on c goroutines with no worker running
	// and returns the worker process, built but not started.
	prepare func(ctx context.Context, db *benchDB, n, c int) (start func() error, stop func(), err error)
}

func (r *runner) bareDrainSpec() drainSpec {
	return drainSpec{series: sBareDrain,
		prepare: func(ctx context.Context, db *benchDB, n, c int) (func() error, func(), error) {
			s, err := startBare(ctx, db, r.tn, r.logger, bareOptions{deferStart: true})
			if err != nil {
				return nil, nil, err
			}
			err = forEach(ctx, n, c, func(ctx context.Context, _ int) error {
				customer, amount, _ := creditArgs("")
				return s.insert(ctx, bareArgs{TenantID: benchTenant, CustomerID: customer, AmountCents: amount, Key: randomKey()})
			})
			if err != nil {
				s.stop()
				return nil, nil, err
			}
			return func() error { return s.startWorker(ctx) }, s.stop, nil
		}}
}

func (r *runner) idemDrainSpec() drainSpec {
	return drainSpec{series: sIdemDrain,
		prepare: func(ctx context.Context, db *benchDB, n, c int) (func() error, func(), error) {
			api, err := startIdem(ctx, db, r.tn, r.logger, stackOptions{noWorker: true})
			if err != nil {
				return nil, nil, err
			}
			err = forEach(ctx, n, c, func(ctx context.Context, _ int) error {
				_, _, raw := creditArgs(randomKey())
				res, err := claimInProcess(ctx, api.api.Gate, "apply_credit", raw)
				if err != nil {
					return err
				}
				if res.Outcome != vocab.OutcomeAccepted {
					return fmt.Errorf("outcome %s, want accepted", res.Outcome)
				}
				return nil
			})
			// The api is not part of the drain: only the worker process runs.
			api.stop()
			if err != nil {
				return nil, nil, err
			}
			pool, w, err := newIdemWorker(ctx, db, r.tn, r.logger, benchConfig(db.url, 0, ""))
			if err != nil {
				return nil, nil, err
			}
			runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			var wg sync.WaitGroup
			start := func() error {
				wg.Add(1)
				go func() { defer wg.Done(); runIdemWorker(runCtx, w, r.logger) }()
				return nil
			}
			stop := func() { cancel(); wg.Wait(); pool.Close() }
			return start, stop, nil
		}}
}

// drain measures, for bare River and then idemgate, one worker process
// working a backlog: n operations accepted at drainFillConc with no worker
// running, then the worker started (same MaxWorkers, pools and fetch
// tuning for both), timed from its start until the last ledger row is
// committed. CPU is over the same span.
func (r *runner) drain(ctx context.Context, n int) error {
	for _, spec := range []drainSpec{r.bareDrainSpec(), r.idemDrainSpec()} {
		rw, err := r.runDrain(ctx, spec, n, drainFillConc)
		if err != nil {
			return fmt.Errorf("%s: %w", seriesLabel[spec.series], err)
		}
		r.add(*rw)
	}
	return nil
}

func (r *runner) runDrain(ctx context.Context, spec drainSpec, n, c int) (*row, error) {
	db, err := r.srv.create(ctx)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	t0 := time.Now()
	start, stop, err := spec.prepare(ctx, db, n, c)
	if err != nil {
		return nil, err
	}
	defer stop()
	fill := time.Since(t0)
	pool, err := db.openPool(ctx, 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	var backlog, before int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'available'`).Scan(&backlog); err != nil {
		return nil, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger_entries`).Scan(&before); err != nil {
		return nil, err
	}
	if backlog != n || before != 0 {
		return nil, fmt.Errorf("backlog of %d available jobs and %d ledger rows before the worker started, want %d and 0", backlog, before, n)
	}
	smp, err := newSampler(ctx, r.srv.adminURL, db.name)
	if err != nil {
		return nil, err
	}
	defer smp.close()
	// Both drains start with the accepts' dirty pages written out, so that
	// neither pays for the other phase's checkpoint.
	if _, err := smp.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}

	stopProf := r.profile(spec.series)
	a := smp.snap(ctx)
	t1 := time.Now()
	if err := start(); err != nil {
		stopProf()
		return nil, err
	}
	done, got, werr := waitLedger(ctx, pool, n, max(2*time.Minute, time.Duration(n)*20*time.Millisecond))
	b := smp.snap(ctx)
	stopProf()

	rw := &row{Series: spec.series, Conc: c, N: n, CPU: usage(a, b)}
	if werr != nil {
		rw.N = got
		rw.Rate = float64(got) / b.at.Sub(t1).Seconds()
		rw.Note = werr.Error()
		return rw, nil
	}
	took := done.Sub(t1)
	rw.Rate = float64(n) / took.Seconds()
	rw.Took = took
	rw.Note = fmt.Sprintf("backlog accepted at c=%d in %s", c, fmtDur(fill))
	// The start-up and the steady state: a row's created_at is its
	// transaction's start, on this machine's clock.
	var first, last float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM min(created_at))::float8, extract(epoch FROM max(created_at))::float8 FROM ledger_entries`).Scan(&first, &last); err == nil && last > first {
		startup := time.Duration(first*float64(time.Second)) - time.Duration(t1.UnixNano())
		rw.Note += fmt.Sprintf("; first row %s after the start, then %.0f ops/s", fmtDur(max(startup, time.Microsecond)), float64(n-1)/(last-first))
	}
	return rw, nil
}
