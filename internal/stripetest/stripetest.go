// Package stripetest is a test Stripe for exactly-once tests: an HTTP server
// speaking the slice of Stripe's v1 API that refunds need (create, retrieve,
// list), with Stripe's Idempotency-Key semantics, that COUNTS what it did and
// INJECTS FAULTS on demand (errors before applying, responses lost after
// applying, a hold between applying and answering).
//
// It is a test double, not a fidelity mock: the real API's shape is checked
// separately against stripe-mock. Use it in-process with Start (httptest) or
// as a standalone process with cmd/teststripe, which serves the same handler,
// including the control endpoints under /_ (stats, holds, faults).
//
// Fault injection applies to refund creates (POST /v1/refunds) only, in this
// order: Delay; authentication; injected errors (FailNext, then ErrorRate),
// which apply nothing and are never stored under the key (they model a
// failure in front of Stripe's idempotency layer, so a retry with the same
// key executes); the idempotency layer; validation; execution; a hold (only
// when a refund was created); then a drop (DropNext, then DropRate), which
// loses the response of an executed or replayed create after it was applied
// and stored.
//
// Control endpoints (no authentication, JSON answers), served by the same
// handler so that a chaos script can drive a standalone process:
//
//	GET  /_stats                 Stats
//	POST /_charges               body: a ChargeSpec or an array of them
//	POST /_clear_charge_error?id=ch_x
//	                             ClearChargeError(id): refunds on it work again
//	POST /_hold                  arms a hold (as HoldNext) owned by the control API
//	GET  /_held?timeout=60s      waits until a hold armed by /_hold is applied: Held
//	                             (404 when none is armed, 504 on timeout)
//	POST /_release               releases every hold armed by /_hold: {"released": n}
//	POST /_drop?n=1              DropNext(n)
//	POST /_fail?n=1&status=500   FailNext(n, status)
//	POST /_expire_keys[?key=K]   ExpireKey(K), or ExpireAllKeys: {"expired": n}
//	POST /_pend?n=1              PendNext(n)
//	POST /_dashboard_refund?charge=ch_x[&amount=cents]
//	                             DashboardRefund: the Refund
//	POST /_fail_refund?id=re_x[&reason=expired_or_canceled_card]
//	                             FailRefund
//	POST /_succeed_refund?id=re_x
//	                             SucceedRefund
//	POST /_webhooks              body: a WebhookConfig; EnableWebhooks
//	GET  /_webhooks              WebhookStats
//	GET  /_webhook_events        WebhookEvents
//	POST /_webhooks/flush?timeout=60s
//	                             FlushWebhooks: WebhookStats (504 on timeout)
//	POST /_webhooks/resend?id=evt_x
//	                             ResendWebhook
//
// Webhooks (EnableWebhooks) are real, signed Stripe events, shaped as the
// API version stripe-go v76 pins and verifiable with its webhook package:
// charge.refunded when a refund is created, charge.refund.updated when its
// status changes (SucceedRefund, FailRefund), and with
// WebhookOptions.RefundEvents also refund.created, refund.updated and
// refund.failed. Their faults (delay, duplicate, reorder, drop, endpoint
// errors retried with backoff) are drawn from Options.Seed too.
package stripetest

import (
	"crypto/rand"
	"encoding/json"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// TestAPIKey is a secret key the server accepts (any key starting with
// "sk_" is accepted unless Options.APIKey pins one).
const TestAPIKey = "sk_test_stripetest"

// OurKeyPrefix is the prefix of idemgate's downstream keys; other keys are
// recorded in ForeignKeys.
const OurKeyPrefix = "idg_"

// Options configures a Server. The zero value (or nil) is a well-behaved
// Stripe with no faults.
type Options struct {
	// Seed seeds the fault-injection random source; 0 picks a random seed,
	// reported in Stats.Seed so a run can be repeated.
	Seed int64
	// DropRate is the probability in [0,1] that an executed or replayed
	// refund create loses its response: the refund is applied and stored
	// under its key, then the connection is closed mid-response.
	DropRate float64
	// ErrorRate is the probability in [0,1] that a refund create answers
	// 500 api_error before anything is applied (not stored under the key).
	ErrorRate float64
	// Delay is slept before handling each refund create.
	Delay time.Duration
	// APIKey, when set, is the only secret key accepted; otherwise any
	// "sk_..." key is.
	APIKey string
	// AutoChargeAmount, when > 0, makes an unknown charge ID ("ch_...")
	// exist on first use with this amount in usd, as if AddCharge had been
	// called. Handy for chaos runs with many orders.
	AutoChargeAmount int64
}

// Server is the test Stripe. It is an http.Handler; all methods are safe
// for concurrent use.
type Server struct {
	opts   Options
	seed   int64
	closed chan struct{}
	once   sync.Once

	mu         sync.Mutex
	rng        *mrand.Rand
	charges    map[string]*charge
	chargeErrs map[string]*ChargeError
	keys       map[string]*keyEntry
	refunds    []*refund // creation order
	refundByID map[string]*refund

	dropNext    int
	pendNext    int
	failNext    []int // statuses, consumed front first
	holds       []*hold
	remoteHolds []*hold

	requests       int
	refundCreates  int
	missingKey     int
	foreignKeys    []string
	foreignSeen    map[string]bool
	keyInUse       int
	keyMismatch    int
	replays        int
	injectedErrors int
	dropped        int
	held           int
	refundsByKey   map[string]int
	refundsByChg   map[string]int

	wh webhooks
}

type charge struct {
	id       string
	amount   int64
	currency string
	refunded int64 // by refunds not failed
	created  int64
	txn      string
	pm       string
}

// ChargeError is the error a charge answers every refund create with.
type ChargeError struct {
	HTTPStatus int    `json:"status"`
	Type       string `json:"type"`
	Code       string `json:"code"`
}

type keyEntry struct {
	fingerprint string
	path        string
	done        bool
	status      int
	body        []byte
	requestID   string
}

type refund struct {
	ID             string
	Charge         string
	Amount         int64
	Currency       string
	Reason         string
	Metadata       map[string]string
	IdempotencyKey string
	Created        int64
	Status         stripe.RefundStatus
	FailureReason  stripe.RefundFailureReason
	failureTxn     string
	receipt        string
	arn            string
	txn            string
}

// New returns a Server; opts may be nil.
func New(opts *Options) *Server {
	var o Options
	if opts != nil {
		o = *opts
	}
	seed := o.Seed
	for seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for _, x := range b {
			seed = seed<<8 | int64(x)
		}
		seed &= 1<<62 - 1
	}
	return &Server{
		opts:         o,
		seed:         seed,
		closed:       make(chan struct{}),
		rng:          mrand.New(mrand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)),
		charges:      map[string]*charge{},
		chargeErrs:   map[string]*ChargeError{},
		keys:         map[string]*keyEntry{},
		refundByID:   map[string]*refund{},
		foreignSeen:  map[string]bool{},
		refundsByKey: map[string]int{},
		refundsByChg: map[string]int{},
	}
}

// Start serves a new Server with httptest and closes both when tb ends.
func Start(tb testing.TB, opts *Options) (*Server, *httptest.Server) {
	tb.Helper()
	s := New(opts)
	ts := httptest.NewServer(s)
	tb.Cleanup(ts.Close)
	tb.Cleanup(s.Close) // runs first: releases holds so ts.Close does not wait on them
	return s, ts
}

// Backends returns stripe-go backends pointed at baseURL with stripe-go's
// own network retries off and logging silenced. httpClient may be nil.
func Backends(baseURL string, httpClient *http.Client) *stripe.Backends {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	cfg := func() *stripe.BackendConfig {
		return &stripe.BackendConfig{
			URL:               stripe.String(baseURL),
			HTTPClient:        httpClient,
			MaxNetworkRetries: stripe.Int64(0),
			LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
			EnableTelemetry:   stripe.Bool(false),
		}
	}
	return &stripe.Backends{
		API:     stripe.GetBackendWithConfig(stripe.APIBackend, cfg()),
		Connect: stripe.GetBackendWithConfig(stripe.ConnectBackend, cfg()),
		Uploads: stripe.GetBackendWithConfig(stripe.UploadsBackend, cfg()),
	}
}

// Close releases every hold and makes waiting handlers (delays, holds,
// /_held polls) return, then waits until the webhook deliveries queued or
// held back are done (remaining retries without backoff) and the delivery
// goroutine has exited. The handler keeps serving; events emitted after
// Close are recorded but not delivered. Close is idempotent.
func (s *Server) Close() {
	s.once.Do(func() { close(s.closed) })
	s.mu.Lock()
	holds := append(slices.Clone(s.holds), s.remoteHolds...)
	s.mu.Unlock()
	for _, h := range holds {
		h.doRelease()
	}
	s.closeWebhooks()
}

// AddCharge registers a charge that refunds can be made against. Adding an
// existing ID replaces its amount and currency and keeps its refunds.
// currency defaults to "usd".
func (s *Server) AddCharge(id string, amountCents int64, currency string) {
	if currency == "" {
		currency = "usd"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.charges[id]; ok {
		c.amount, c.currency = amountCents, strings.ToLower(currency)
		return
	}
	s.charges[id] = newCharge(id, amountCents, currency)
}

func newCharge(id string, amount int64, currency string) *charge {
	return &charge{id: id, amount: amount, currency: strings.ToLower(currency),
		created: time.Now().Unix(), txn: newID("txn_"), pm: newID("pm_")}
}

// SetChargeError makes every refund create on charge id answer httpStatus
// with a Stripe error of errType and code (stored under the key like any
// executed request), e.g. SetChargeError("ch_x", 402, "card_error",
// "card_declined"). httpStatus 0 means 402, errType "" means "card_error",
// code "" means "card_declined". The charge need not be registered.
func (s *Server) SetChargeError(id string, httpStatus int, errType, code string) {
	if httpStatus == 0 {
		httpStatus = http.StatusPaymentRequired
	}
	if errType == "" {
		errType = string(stripe.ErrorTypeCard)
	}
	if code == "" {
		code = string(stripe.ErrorCodeCardDeclined)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chargeErrs[id] = &ChargeError{HTTPStatus: httpStatus, Type: errType, Code: code}
}

// ClearChargeError undoes SetChargeError.
func (s *Server) ClearChargeError(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.chargeErrs, id)
}

// DropNext makes the next n executed or replayed refund creates lose their
// response after being applied and stored (on top of DropRate).
func (s *Server) DropNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropNext += n
}

// FailNext makes the next n refund creates answer status (e.g. 500, 503,
// 429) before anything is applied; not stored under the key.
func (s *Server) FailNext(n int, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failNext = append(s.failNext, status)
	}
}

// ExpireKey forgets the idempotency key, as Stripe does after 24 hours: a
// later request with it executes anew. It reports whether the key was known.
// A key whose first request is still in progress is not forgotten.
func (s *Server) ExpireKey(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[key]
	if !ok || !e.done {
		return false
	}
	delete(s.keys, key)
	return true
}

// ExpireAllKeys forgets every completed idempotency key and returns how many.
func (s *Server) ExpireAllKeys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, e := range s.keys {
		if e.done {
			delete(s.keys, k)
			n++
		}
	}
	return n
}

// StoredResponse returns what Stripe stored for key: the status and body a
// replay answers with. ok is false while the key is unknown or in progress.
func (s *Server) StoredResponse(key string) (status int, body []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, found := s.keys[key]
	if !found || !e.done {
		return 0, nil, false
	}
	return e.status, slices.Clone(e.body), true
}

// Refund is a snapshot of a refund the server created.
type Refund struct {
	ID       string            `json:"id"`
	Charge   string            `json:"charge"`
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Reason   string            `json:"reason,omitempty"`
	Metadata map[string]string `json:"metadata"`
	// IdempotencyKey is the key of the request that created it ("" if none,
	// as for DashboardRefund).
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Created        time.Time `json:"created"`
	// Status is "succeeded", "pending" (PendNext) or "failed" (FailRefund);
	// FailureReason is set when failed.
	Status        string `json:"status"`
	FailureReason string `json:"failure_reason,omitempty"`
}

// Refunds returns every refund created, oldest first.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Refund, 0, len(s.refunds))
	for _, r := range s.refunds {
		out = append(out, r.snapshot())
	}
	return out
}

// RefundsByKey returns how many refund objects were CREATED per
// idempotency key (replays do not count; keys that created none are absent).
func (s *Server) RefundsByKey() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneMap(s.refundsByKey)
}

// RefundsByCharge returns how many refunds were created per charge.
func (s *Server) RefundsByCharge() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneMap(s.refundsByChg)
}

// RefundsByMetadata returns how many refunds were created per value of the
// metadata field (refunds without it are absent), e.g.
// RefundsByMetadata("idemgate_operation_id").
func (s *Server) RefundsByMetadata(field string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, r := range s.refunds {
		if v, ok := r.Metadata[field]; ok {
			out[v]++
		}
	}
	return out
}

// RefundedAmount returns the total refunded on charge, in cents (failed
// refunds excluded).
func (s *Server) RefundedAmount(chargeID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum int64
	for _, r := range s.refunds {
		if r.Charge == chargeID && r.Status != stripe.RefundStatusFailed {
			sum += r.Amount
		}
	}
	return sum
}

// Requests returns how many API requests arrived: any method, path and
// outcome, except the control endpoints under /_.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// MissingKey returns how many refund creates came without an
// Idempotency-Key (they are still processed).
func (s *Server) MissingKey() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.missingKey
}

// ForeignKeys returns the distinct Idempotency-Keys of refund creates that
// do not start with "idg_", in first-seen order (stripe-go invents a random
// key when none is set: our code must always send its own).
func (s *Server) ForeignKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.foreignKeys)
}

// Stats is everything the server counted; JSON as served at GET /_stats.
type Stats struct {
	Seed int64 `json:"seed"`
	// Requests counts API requests (all but /_ control endpoints);
	// RefundCreates the POST /v1/refunds among them, whatever their outcome.
	Requests      int `json:"requests"`
	RefundCreates int `json:"refund_creates"`
	// RefundsCreated counts refund objects created.
	RefundsCreated int      `json:"refunds_created"`
	Replays        int      `json:"replays"`
	MissingKey     int      `json:"missing_key"`
	ForeignKeys    []string `json:"foreign_keys"`
	// KeyInUse counts 409 idempotency_key_in_use answers; KeyMismatch the
	// 400 idempotency_error answers (same key, other parameters).
	KeyInUse       int `json:"key_in_use"`
	KeyMismatch    int `json:"key_mismatch"`
	InjectedErrors int `json:"injected_errors"`
	Dropped        int `json:"dropped"`
	Held           int `json:"held"`
	// Pending faults armed with DropNext, FailNext and HoldNext.
	PendingDrops int `json:"pending_drops"`
	PendingFails int `json:"pending_fails"`
	PendingHolds int `json:"pending_holds"`

	// PendingPends counts refunds still to be created pending (PendNext).
	PendingPends int `json:"pending_pends"`

	RefundsByKey    map[string]int `json:"refunds_by_key"`
	RefundsByCharge map[string]int `json:"refunds_by_charge"`
	// RefundedAmount sums refunds per charge, failed ones excluded.
	RefundedAmount map[string]int64 `json:"refunded_amount"`
	// RefundsByMetadata counts created refunds per metadata field, per value.
	RefundsByMetadata map[string]map[string]int `json:"refunds_by_metadata"`
	// RefundsByStatus counts created refunds per current status.
	RefundsByStatus map[string]int `json:"refunds_by_status"`

	Webhooks WebhookStats `json:"webhooks"`
}

// Stats returns a snapshot of all counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Seed:              s.seed,
		Requests:          s.requests,
		RefundCreates:     s.refundCreates,
		RefundsCreated:    len(s.refunds),
		Replays:           s.replays,
		MissingKey:        s.missingKey,
		ForeignKeys:       slices.Clone(s.foreignKeys),
		KeyInUse:          s.keyInUse,
		KeyMismatch:       s.keyMismatch,
		InjectedErrors:    s.injectedErrors,
		Dropped:           s.dropped,
		Held:              s.held,
		PendingDrops:      s.dropNext,
		PendingFails:      len(s.failNext),
		PendingHolds:      len(s.holds),
		PendingPends:      s.pendNext,
		RefundsByKey:      cloneMap(s.refundsByKey),
		RefundsByCharge:   cloneMap(s.refundsByChg),
		RefundedAmount:    map[string]int64{},
		RefundsByMetadata: map[string]map[string]int{},
		RefundsByStatus:   map[string]int{},
		Webhooks:          s.webhookStatsLocked(),
	}
	if st.ForeignKeys == nil {
		st.ForeignKeys = []string{}
	}
	for _, r := range s.refunds {
		st.RefundsByStatus[string(r.Status)]++
		if r.Status != stripe.RefundStatusFailed {
			st.RefundedAmount[r.Charge] += r.Amount
		}
		for k, v := range r.Metadata {
			m := st.RefundsByMetadata[k]
			if m == nil {
				m = map[string]int{}
				st.RefundsByMetadata[k] = m
			}
			m[v]++
		}
	}
	return st
}

// String renders Stats as indented JSON, for logging in a failing test.
func (st Stats) String() string {
	b, _ := json.MarshalIndent(st, "", "  ")
	return string(b)
}

// hold is one armed "apply, then block until released".
type hold struct {
	applied     chan string   // buffered 1: the refund id, for HoldNext's caller
	appliedDone chan struct{} // closed once applied
	release     chan struct{} // closed by doRelease
	relOnce     sync.Once
	s           *Server
	remote      bool

	// set under s.mu before appliedDone is closed
	refundID, key, chargeID string
}

func (h *hold) doRelease() {
	h.relOnce.Do(func() { close(h.release) })
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.holds = slices.DeleteFunc(h.s.holds, func(x *hold) bool { return x == h })
	h.s.remoteHolds = slices.DeleteFunc(h.s.remoteHolds, func(x *hold) bool { return x == h })
}

// HoldNext arms a hold on the next refund create that creates a refund:
// that request is applied (the refund exists and counts), then its refund
// id is sent on applied and the handler blocks, with its idempotency key
// still in progress (a concurrent duplicate gets 409), until release is
// called, the client goes away or the Server is closed; then its response
// is stored under the key and written. release before the hold is used
// disarms it. Holds are used in the order they were armed; release is
// idempotent.
func (s *Server) HoldNext() (applied <-chan string, release func()) {
	h := s.armHold(false)
	return h.applied, h.doRelease
}

func (s *Server) armHold(remote bool) *hold {
	h := &hold{
		applied:     make(chan string, 1),
		appliedDone: make(chan struct{}),
		release:     make(chan struct{}),
		s:           s,
		remote:      remote,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds = append(s.holds, h)
	if remote {
		s.remoteHolds = append(s.remoteHolds, h)
	}
	return h
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newID returns prefix + 24 random alphanumerics (crypto random: IDs stay
// unique across processes and seeds).
func newID(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return prefix + string(b[:])
}

func newDigits(n int) string {
	var b = make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = '0' + b[i]%10
	}
	return string(b)
}
