package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"
)

// operation is the part of an operation the clients read.
type operation struct {
	OperationID string `json:"operation_id"`
	Status      string `json:"status"`
	Attempts    int    `json:"attempts"`
	Error       *struct {
		Code string `json:"code"`
	} `json:"error"`
}

func (o *operation) terminal() bool { return o.Status == "succeeded" || o.Status == "failed" }

// answer covers both a mutation's answer and a problem+json error body.
type answer struct {
	Outcome   string     `json:"outcome"`
	Replayed  bool       `json:"replayed"`
	RetryMS   int64      `json:"retry_after_ms"`
	Operation *operation `json:"operation"`
	Error     *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// Result is what the callers of one planned operation saw.
type Result struct {
	Op
	// OperationID is the operation's id as the api reported it ("" if no
	// answer ever named one).
	OperationID string `json:"operation_id"`
	// Status is the terminal status reached ("" if none).
	Status    string `json:"status"`
	ErrorCode string `json:"error_code,omitempty"`
	Attempts  int    `json:"attempts"`
	// Requests counts HTTP requests of all callers; Answers counts them by
	// HTTP status, or "timeout"/"network" when none came back.
	Requests int            `json:"requests"`
	Answers  map[string]int `json:"answers"`
	Replays  int            `json:"replays"`
	// Accepted counts answers "accepted" that reached a caller: more than
	// one is an anomaly, and one for an answer a proxy held and dropped is
	// a second claim.
	Accepted int `json:"accepted"`
	// Lost counts calls (POST) whose connection failed before an answer:
	// a replica killed, or down; AfterLoss counts how the same caller's
	// next call with the key was answered (its outcome, or its status).
	Lost      int            `json:"lost,omitempty"`
	AfterLoss map[string]int `json:"after_loss,omitempty"`
	// OperationIDs and Terminal list what every caller saw; more than one
	// value is an anomaly.
	OperationIDs []string `json:"operation_ids"`
	Terminal     []string `json:"terminal"`
	// Anomalies are answers a correct api never gives.
	Anomalies []string      `json:"anomalies,omitempty"`
	Started   time.Time     `json:"started"`
	Latency   time.Duration `json:"latency"`
	callers   int
}

// Client is an agent-like REST client of the api, behind a load
// balancer: each caller starts on a replica of its own and moves to the
// next one when a connection fails or a replica answers 5xx.
type Client struct {
	// BaseURLs are the api replicas (one or more).
	BaseURLs []string
	Token    string
	HTTP     *http.Client
	Seed     int64
}

// NewClient returns a client of the replicas baseURLs with a per-request
// timeout.
func NewClient(baseURLs []string, token string, seed int64) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &Client{BaseURLs: baseURLs, Token: token, Seed: seed,
		HTTP: &http.Client{Timeout: 10 * time.Second, Transport: tr}}
}

// replica is one caller's choice of api replica.
type replica struct {
	c *Client
	i int
}

func (r *replica) base() string { return r.c.BaseURLs[r.i%len(r.c.BaseURLs)] }
func (r *replica) next()        { r.i++ }

// Run fires the plan's operations at an even pace over p.Duration, at most
// concurrency at a time, each op's duplicates in parallel, and returns when
// every op is terminal or ctx ends. dispatched is closed when the last op
// has started.
func (c *Client) Run(ctx context.Context, p *Plan, concurrency int, dispatched chan<- struct{}) []*Result {
	results := make([]*Result, len(p.Ops))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range p.Ops {
		results[i] = &Result{Op: p.Ops[i], Answers: map[string]int{}}
	}
	for i := range p.Ops {
		at := start.Add(time.Duration(int64(p.Duration) * int64(i) / int64(len(p.Ops))))
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(r *Result) {
			defer wg.Done()
			defer func() { <-sem }()
			c.runOp(ctx, r)
		}(results[i])
	}
	close(dispatched)
	wg.Wait()
	return results
}

// runOp runs the op's callers in parallel and merges what they saw.
func (c *Client) runOp(ctx context.Context, r *Result) {
	r.Started = time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for d := range r.Dups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.caller(ctx, r, d, &mu)
		}()
	}
	wg.Wait()
	r.Latency = time.Since(r.Started)
	sort.Strings(r.OperationIDs)
	if len(r.OperationIDs) > 1 {
		r.Anomalies = append(r.Anomalies, fmt.Sprintf("callers saw %d operation ids for one key: %v", len(r.OperationIDs), r.OperationIDs))
	}
	if len(r.Terminal) > 1 {
		r.Anomalies = append(r.Anomalies, fmt.Sprintf("callers saw different terminal outcomes: %v", r.Terminal))
	}
	if r.Accepted > 1 {
		r.Anomalies = append(r.Anomalies, fmt.Sprintf("%d answers \"accepted\" for one key", r.Accepted))
	}
}

// caller is one agent calling the tool with the op's key until it learns
// a terminal outcome: 202/409 are polled (or re-posted), 429 and 5xx,
// timeouts and connection errors are retried with the same key after a
// backoff.
func (c *Client) caller(ctx context.Context, r *Result, dup int, mu *sync.Mutex) {
	rng := rand.New(rand.NewPCG(uint64(c.Seed), uint64(r.Index*8+dup)))
	args := make(map[string]any, len(r.Args)+1)
	for k, v := range r.Args {
		args[k] = v
	}
	if r.Volatile != "" {
		args[r.Volatile] = fmt.Sprintf("chaos caller %d", dup)
	}
	body, _ := json.Marshal(args)
	note := func(f func()) { mu.Lock(); f(); mu.Unlock() }
	seen := func(op *operation) {
		if op == nil || op.OperationID == "" {
			return
		}
		note(func() {
			if !contains(r.OperationIDs, op.OperationID) {
				r.OperationIDs = append(r.OperationIDs, op.OperationID)
			}
			if r.OperationID == "" {
				r.OperationID = op.OperationID
			}
		})
	}
	done := func(op *operation) {
		code := ""
		if op.Error != nil {
			code = op.Error.Code
		}
		note(func() {
			t := op.Status + "/" + code
			if !contains(r.Terminal, t) {
				r.Terminal = append(r.Terminal, t)
			}
			r.Status, r.ErrorCode = op.Status, code
			r.Attempts = max(r.Attempts, op.Attempts)
		})
	}
	anomaly := func(s string) { note(func() { r.Anomalies = append(r.Anomalies, s) }) }
	strikes := 0 // unexpected answers; a caller gives up after a few
	backoff := newBackoff(rng)
	rep := &replica{c: c, i: rng.IntN(len(c.BaseURLs))}
	lost := false // the last call's connection failed
	// Stagger duplicates a little, as real retries would be.
	sleep(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
	for ctx.Err() == nil {
		status, ans, retry, err := c.do(ctx, rep.base(), http.MethodPost, "/v1/tools/"+r.Tool, r.Key, body)
		note(func() { r.Requests++; r.Answers[label(status, err)]++ })
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			note(func() { r.Lost++ })
			lost = true
			rep.next() // another replica, as a load balancer would pick
			sleep(ctx, backoff.next())
			continue
		}
		if ans != nil && ans.Outcome == "accepted" {
			note(func() { r.Accepted++ })
		}
		if lost {
			lost = false
			what := strconv.Itoa(status)
			if ans != nil && ans.Outcome != "" {
				what = ans.Outcome
			}
			note(func() {
				if r.AfterLoss == nil {
					r.AfterLoss = map[string]int{}
				}
				r.AfterLoss[what]++
			})
		}
		if ans != nil && ans.Replayed {
			note(func() { r.Replays++ })
		}
		switch {
		case status == http.StatusOK || status == http.StatusAccepted || status == http.StatusConflict:
			if ans == nil || ans.Operation == nil {
				anomaly(fmt.Sprintf("POST answered %d without an operation", status))
				strikes++
				break
			}
			seen(ans.Operation)
			if ans.Operation.terminal() {
				if status != http.StatusOK {
					anomaly(fmt.Sprintf("POST answered %d with a terminal operation", status))
				}
				done(ans.Operation)
				return
			}
			if status == http.StatusOK {
				anomaly("POST answered 200 with a non-terminal operation")
			}
			if op := c.poll(ctx, r, rep, rng, retry, note, seen, anomaly); op != nil {
				done(op)
				return
			}
			backoff.reset()
			continue
		case status == http.StatusTooManyRequests:
			sleep(ctx, clamp(retry, 100*time.Millisecond, 2*time.Second))
			continue
		case status >= 500:
			rep.next()
			sleep(ctx, max(clamp(retry, 0, 2*time.Second), backoff.next()))
			continue
		default:
			code := ""
			if ans != nil && ans.Error != nil {
				code = ans.Error.Code
			}
			anomaly(fmt.Sprintf("POST answered %d %s", status, code))
			strikes++
		}
		if strikes >= 5 {
			anomaly("caller gave up after 5 unexpected answers")
			return
		}
		sleep(ctx, backoff.next())
	}
}

// poll waits for the operation to become terminal, mostly with GET
// /v1/operations and sometimes by leaving (nil) so that the caller posts
// the same call again. It returns the terminal operation, or nil.
func (c *Client) poll(ctx context.Context, r *Result, rep *replica, rng *rand.Rand, wait time.Duration,
	note func(func()), seen func(*operation), anomaly func(string)) *operation {
	backoff := newBackoff(rng)
	path := "/v1/operations/" + url.PathEscape(r.Tool) + "/" + url.PathEscape(r.Key)
	for ctx.Err() == nil {
		sleep(ctx, clamp(wait, 100*time.Millisecond, time.Second)+time.Duration(rng.IntN(100))*time.Millisecond)
		if rng.IntN(100) < 25 {
			return nil // re-post with the same key
		}
		status, body, err := c.raw(ctx, rep.base(), http.MethodGet, path, "", nil)
		note(func() { r.Requests++; r.Answers["GET "+label(status, err)]++ })
		wait = 250 * time.Millisecond
		switch {
		case err != nil || status >= 500:
			rep.next()
			wait = backoff.next()
		case status == http.StatusTooManyRequests:
			wait = backoff.next()
		case status == http.StatusOK:
			var op operation
			if err := json.Unmarshal(body, &op); err != nil || op.OperationID == "" {
				anomaly(fmt.Sprintf("GET %s answered 200 with %q", path, truncate(string(body), 200)))
				return nil
			}
			seen(&op)
			if op.terminal() {
				return &op
			}
		default:
			anomaly(fmt.Sprintf("GET %s answered %d: %s", path, status, truncate(string(body), 200)))
			return nil
		}
	}
	return nil
}

// do sends a request and decodes an answer (nil when the body is not one).
func (c *Client) do(ctx context.Context, base, method, path, key string, body []byte) (int, *answer, time.Duration, error) {
	status, b, h, err := c.rawh(ctx, base, method, path, key, body)
	if err != nil {
		return 0, nil, 0, err
	}
	var retry time.Duration
	if s := h.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			retry = time.Duration(n) * time.Second
		}
	}
	var a answer
	if json.Unmarshal(b, &a) != nil {
		return status, nil, retry, nil
	}
	if a.RetryMS > 0 {
		retry = time.Duration(a.RetryMS) * time.Millisecond
	}
	return status, &a, retry, nil
}

func (c *Client) raw(ctx context.Context, base, method, path, key string, body []byte) (int, []byte, error) {
	status, b, _, err := c.rawh(ctx, base, method, path, key, body)
	return status, b, err
}

func (c *Client) rawh(ctx context.Context, base, method, path, key string, body []byte) (int, []byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	// net/http resends a request with an Idempotency-Key header on a new
	// connection when a reused one closes before the answer: that would
	// hide a lost answer, which the caller must see and retry itself.
	req.GetBody = nil
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, b, resp.Header, nil
}

// label names an HTTP outcome for the answer counters.
func label(status int, err error) string {
	if err == nil {
		return strconv.Itoa(status)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "cancelled"
	}
	return "network"
}

type backoff struct {
	rng *rand.Rand
	d   time.Duration
}

func newBackoff(rng *rand.Rand) *backoff { return &backoff{rng: rng, d: 100 * time.Millisecond} }

// next returns the current delay with jitter and doubles it, up to 2s.
func (b *backoff) next() time.Duration {
	d := b.d/2 + time.Duration(b.rng.Int64N(int64(b.d)))
	b.d = min(2*b.d, 2*time.Second)
	return d
}

func (b *backoff) reset() { b.d = 100 * time.Millisecond }

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
