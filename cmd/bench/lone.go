package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// --- 9. lone calls: the time to the outcome of one call at a time ---

// loneConfig is one River configuration of the lone-call figures.
type loneConfig struct {
	Name string
	// Idem: idemgate is measured in this configuration too (its fetch
	// settings are the app's own; only MaxWorkers can be chosen).
	Idem bool
	// River is bare River's configuration; its MaxWorkers is idemgate's
	// too.
	River riverSettings
	// Gap is the pause between two calls (not timed).
	Gap time.Duration
}

// loneConfigs are the configurations the lone-call figures run in: the
// quickstart's (the app's worker settings with its default MaxWorkers,
// the inserting client's NOTIFY limiter at the app's 10 ms, as the api's
// is), the bench's tuning, and two experiments: bare River's inserting
// client at River's default FetchCooldown (100 ms), and calls spaced
// wider than that.
func (r *runner) loneConfigs() []loneConfig {
	quick := riverSettings{FetchCooldown: app.DefaultFetchCooldown, FetchPollInterval: app.DefaultFetchPollInterval, MaxWorkers: app.DefaultMaxWorkers,
		InsertFetchCooldown: app.DefaultFetchCooldown}
	tuned := *tunedRiver(r.tn.MaxWorkers)
	notify := tuned
	notify.InsertFetchCooldown = 0 // River's default, 100 ms
	return []loneConfig{
		{Name: loneDefaults, Idem: true, River: quick},
		{Name: loneTuned, Idem: true, River: tuned},
		{Name: loneNotify, River: notify},
		{Name: loneSpaced, Idem: true, River: tuned, Gap: loneGap},
	}
}

const (
	loneDefaults = "quickstart defaults"
	loneTuned    = "bench tuning"
	loneNotify   = "experiment: inserting client's FetchCooldown at River's 100ms"
	loneSpaced   = "experiment: bench tuning, 150 ms between calls"
	// loneGap is longer than River's default FetchCooldown (100ms), the
	// inserting clients' NOTIFY limiter: every insert then notifies.
	loneGap = 150 * time.Millisecond
	// loneWarmup calls open the connections and fill the caches first.
	loneWarmup = 5
)

// loneResult is one system's lone calls in one configuration.
type loneResult struct {
	Config    loneConfig
	System    string // "idemgate over MCP" or "bare River"
	Mechanism string // how the outcome is seen
	Lat       []time.Duration
	// EventLat is the time to River's own completion event in the
	// worker's process (Client.Subscribe), beside Lat.
	EventLat []time.Duration
	// QueueWait is River's JobStatistics.QueueWaitDuration per call: from
	// the job's scheduled_at (its insert) to the worker's fetch.
	QueueWait []time.Duration
	// Run is River's JobStatistics.RunDuration per call: the worker's Work.
	Run []time.Duration
	// Rest is the call's time outside the queue wait and the run: the
	// insert (the claim), seeing the outcome (the poll's lag) and, over
	// MCP, the transport.
	Rest []time.Duration
	// Fallback counts idemgate calls whose answer was not terminal within
	// the wait, and were polled with get_operation.
	Fallback int
	CPU      cpuUsage
}

const (
	loneIdem = "idemgate over MCP"
	loneBare = "bare River"
)

// lone measures, per configuration, n calls made one at a time: idemgate
// over MCP (IDEMGATE_WAIT at its default: the call answers with the
// outcome) and bare River (InsertTx, then the job row polled every
// core.DefaultPollInterval as the gate's waiter polls its claims; River's
// own completion event is recorded beside it).
func (r *runner) lone(ctx context.Context, n int) error {
	for _, lc := range r.loneConfigs() {
		calls := n
		if lc.Gap > 0 {
			calls = max(n/2, 10) // a spaced call costs its gap too
		}
		res, err := r.loneBare(ctx, lc, calls)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", loneBare, lc.Name, err)
		}
		r.addLone(res)
		if !lc.Idem {
			continue
		}
		if res, err = r.loneIdem(ctx, lc, calls); err != nil {
			return fmt.Errorf("%s, %s: %w", loneIdem, lc.Name, err)
		}
		r.addLone(res)
	}
	return nil
}

func (r *runner) addLone(res *loneResult) {
	r.mu.Lock()
	r.lones = append(r.lones, res)
	r.mu.Unlock()
	r.progress("lone calls, %-52s %-18s n=%d p50 %s p90 %s p99 %s; %d waited for the fetch poll; queue wait p50 %s p99 %s; River event p50 %s; cpu ms/call %s; %s",
		res.Config.Name+":", res.System, len(res.Lat), fmtDur(percentile(res.Lat, 50)), fmtDur(percentile(res.Lat, 90)), fmtDur(percentile(res.Lat, 99)),
		res.polled(), fmtDur(percentile(res.QueueWait, 50)), fmtDur(percentile(res.QueueWait, 99)), fmtDur(percentile(res.EventLat, 50)), res.cpuPerCall(), res.CPU)
}

// jobEvents records River's completion events of a worker client in the
// background, by job id, so that waiting for one never delays the next
// call: River's batch completer sends them when it flushes, every 250ms
// while fewer than 100 completions wait.
type jobEvents struct {
	cancel func()
	once   sync.Once
	done   chan struct{}
	mu     sync.Mutex
	seen   map[int64]loneEvent
}

type loneEvent struct {
	at    time.Time
	stats *river.JobStatistics
}

func subscribeCompleted(c *river.Client[pgx.Tx]) *jobEvents {
	ch, cancel := c.Subscribe(river.EventKindJobCompleted)
	j := &jobEvents{cancel: cancel, done: make(chan struct{}), seen: map[int64]loneEvent{}}
	go func() {
		defer close(j.done)
		for ev := range ch {
			j.mu.Lock()
			j.seen[ev.Job.ID] = loneEvent{at: time.Now(), stats: ev.JobStats}
			j.mu.Unlock()
		}
	}()
	return j
}

// collect waits up to timeout for the events of ids and returns those seen.
func (j *jobEvents) collect(ids []int64, timeout time.Duration) map[int64]loneEvent {
	deadline := time.Now().Add(timeout)
	for {
		j.mu.Lock()
		missing := 0
		for _, id := range ids {
			if _, ok := j.seen[id]; !ok {
				missing++
			}
		}
		j.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	j.stop()
	return j.seen
}

// stop ends the subscription; it may be called more than once.
func (j *jobEvents) stop() {
	j.once.Do(func() { j.cancel(); <-j.done })
}

// loneCall is one measured call: when it started, its job, and when its
// outcome was seen.
type loneCall struct {
	t0    time.Time
	job   int64
	taken time.Duration
}

func (r *runner) loneBare(ctx context.Context, lc loneConfig, n int) (*loneResult, error) {
	db, err := r.srv.create(ctx)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	rs := lc.River
	s, err := startBare(ctx, db, r.tn, r.logger, bareOptions{river: &rs})
	if err != nil {
		return nil, err
	}
	defer s.stop()
	js := subscribeCompleted(s.worker)
	defer js.stop()
	smp, err := newSampler(ctx, r.srv.adminURL, db.name)
	if err != nil {
		return nil, err
	}
	defer smp.close()

	res := &loneResult{Config: lc, System: loneBare,
		Mechanism: fmt.Sprintf("InsertTx, then the job row read every %s (as the gate's waiter reads claims); River's completion event beside it", core.DefaultPollInterval)}
	one := func() (loneCall, error) {
		customer, amount, _ := creditArgs("")
		t0 := time.Now()
		id, err := s.insertJob(ctx, bareArgs{TenantID: benchTenant, CustomerID: customer, AmountCents: amount, Key: randomKey()})
		if err != nil {
			return loneCall{}, err
		}
		// The poll, as the gate's waiter: a ticker started after the
		// commit, one read per tick.
		polled := make(chan error, 1)
		var pollAt time.Time
		go func() {
			tick := time.NewTicker(core.DefaultPollInterval)
			defer tick.Stop()
			deadline := time.Now().Add(time.Minute)
			for range tick.C {
				var state string
				if err := s.insertPool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state); err != nil {
					polled <- err
					return
				}
				if state == "completed" {
					pollAt = time.Now()
					polled <- nil
					return
				}
				if time.Now().After(deadline) {
					polled <- fmt.Errorf("job %d still %s after a minute", id, state)
					return
				}
			}
		}()
		if err := <-polled; err != nil {
			return loneCall{}, err
		}
		return loneCall{t0: t0, job: id, taken: pollAt.Sub(t0)}, nil
	}
	if err := r.loneLoop(ctx, lc, n, smp, js, res, one); err != nil {
		return nil, err
	}
	return res, nil
}

// riverClient is the River client inside app's worker (jobs.River).
type riverClient interface {
	Client() *river.Client[pgx.Tx]
}

func (r *runner) loneIdem(ctx context.Context, lc loneConfig, n int) (*loneResult, error) {
	db, err := r.srv.create(ctx)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	tn := r.tn
	tn.MaxWorkers = lc.River.MaxWorkers
	s, err := startIdem(ctx, db, tn, r.logger, stackOptions{http: true, wait: config.DefaultWait})
	if err != nil {
		return nil, err
	}
	defer s.stop()
	rc, ok := s.worker.Client.(riverClient)
	if !ok {
		return nil, fmt.Errorf("the worker's River is a %T, not jobs.River", s.worker.Client)
	}
	js := subscribeCompleted(rc.Client())
	defer js.stop()
	ss, closeSessions, err := sessions(ctx, s.url, 1)
	if err != nil {
		return nil, err
	}
	defer closeSessions()
	session := ss[0]
	smp, err := newSampler(ctx, r.srv.adminURL, db.name)
	if err != nil {
		return nil, err
	}
	defer smp.close()

	res := &loneResult{Config: lc, System: loneIdem,
		Mechanism: fmt.Sprintf("the call's own wait (IDEMGATE_WAIT %s: the gate's waiter reads the claim every %s); get_operation polled if the answer is not terminal", config.DefaultWait, core.DefaultPollInterval)}
	one := func() (loneCall, error) {
		key := randomKey()
		_, _, raw := creditArgs(key)
		t0 := time.Now()
		ans, err := callMCP(ctx, session, raw)
		if err != nil {
			return loneCall{}, err
		}
		if ans.Operation == nil {
			return loneCall{}, fmt.Errorf("outcome %s without an operation", ans.Outcome)
		}
		status := ans.Operation.Status
		if !status.Terminal() {
			res.Fallback++
		}
		for !status.Terminal() {
			if time.Since(t0) > time.Minute {
				return loneCall{}, fmt.Errorf("operation %s still %s after a minute", ans.Operation.OperationID, status)
			}
			time.Sleep(core.DefaultPollInterval)
			if status, err = getOperationStatus(ctx, session, "apply_credit", key); err != nil {
				return loneCall{}, err
			}
		}
		taken := time.Since(t0)
		if status != vocab.StatusSucceeded {
			return loneCall{}, fmt.Errorf("operation %s %s", ans.Operation.OperationID, status)
		}
		return loneCall{t0: t0, job: ans.Operation.JobID, taken: taken}, nil
	}
	if err := r.loneLoop(ctx, lc, n, smp, js, res, one); err != nil {
		return nil, err
	}
	return res, nil
}

// loneLoop makes the warm-up calls, then n measured calls one after the
// other (lc.Gap apart), with the CPU over the measured ones; then it
// matches River's completion events to the calls.
func (r *runner) loneLoop(ctx context.Context, lc loneConfig, n int, smp *sampler, js *jobEvents, res *loneResult, one func() (loneCall, error)) error {
	for range loneWarmup {
		if _, err := one(); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	res.Fallback = 0
	stopProf := r.profile(fmt.Sprintf("lone-%d", len(r.lones)))
	calls := make([]loneCall, 0, n)
	a := smp.snap(ctx)
	for range n {
		if lc.Gap > 0 {
			time.Sleep(lc.Gap)
		}
		c, err := one()
		if err != nil {
			stopProf()
			return err
		}
		calls = append(calls, c)
	}
	res.CPU = usage(a, smp.snap(ctx))
	stopProf()
	ids := make([]int64, len(calls))
	for i, c := range calls {
		ids[i] = c.job
		res.Lat = append(res.Lat, c.taken)
	}
	events := js.collect(ids, 2*time.Second)
	for _, c := range calls {
		ev, ok := events[c.job]
		if !ok {
			continue
		}
		res.EventLat = append(res.EventLat, ev.at.Sub(c.t0))
		if ev.stats != nil {
			res.QueueWait = append(res.QueueWait, ev.stats.QueueWaitDuration)
			res.Run = append(res.Run, ev.stats.RunDuration)
			res.Rest = append(res.Rest, max(c.taken-ev.stats.QueueWaitDuration-ev.stats.RunDuration, 0))
		}
	}
	return nil
}

// loneSlowWait is a queue wait that only the worker's fetch poll ends: no
// NOTIFY reached it (the inserting client's limiter held it back).
const loneSlowWait = 50 * time.Millisecond

// polled counts the calls whose job waited longer than loneSlowWait.
func (res *loneResult) polled() int {
	n := 0
	for _, w := range res.QueueWait {
		if w > loneSlowWait {
			n++
		}
	}
	return n
}

// cpuPerCall is harness + Postgres CPU ms per measured call.
func (res *loneResult) cpuPerCall() string {
	if len(res.Lat) == 0 || res.CPU.Seconds == 0 {
		return "–"
	}
	per := func(cores float64) float64 { return cores * res.CPU.Seconds / float64(len(res.Lat)) * 1000 }
	return fmt.Sprintf("%.2f + %.2f", per(res.CPU.HarnessCores), per(res.CPU.PGCores))
}

// getOperationStatus reads an operation's status with get_operation.
func getOperationStatus(ctx context.Context, s *mcp.ClientSession, tool, key string) (vocab.Status, error) {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "get_operation", Arguments: map[string]any{"tool": tool, "idempotency_key": key}})
	if err != nil {
		return "", err
	}
	if len(res.Content) != 1 {
		return "", fmt.Errorf("get_operation: %d content items", len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return "", fmt.Errorf("get_operation: content is %T", res.Content[0])
	}
	if res.IsError {
		return "", errors.New("get_operation: " + text.Text)
	}
	var op struct {
		Status    vocab.Status `json:"status"`
		Operation *struct {
			Status vocab.Status `json:"status"`
		} `json:"operation"`
	}
	if err := json.Unmarshal([]byte(text.Text), &op); err != nil {
		return "", err
	}
	if op.Operation != nil {
		return op.Operation.Status, nil
	}
	return op.Status, nil
}
