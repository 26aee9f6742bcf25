package stripetest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// Webhook delivery defaults.
const (
	// DefaultWebhookMaxAttempts is how many times a delivery is attempted
	// (the first try and three retries, as Stripe does in test mode).
	DefaultWebhookMaxAttempts = 4
	// DefaultWebhookBackoff is the wait before the first retry; it doubles
	// for each next one, up to MaxWebhookBackoff.
	DefaultWebhookBackoff = time.Second
	// MaxWebhookBackoff caps the wait between two attempts.
	MaxWebhookBackoff = 30 * time.Second
	// DefaultWebhookTimeout is the per-attempt HTTP timeout when
	// WebhookOptions.HTTPClient is nil.
	DefaultWebhookTimeout = 10 * time.Second
)

// Event types the server sends. EventTypeRefundFailed has no constant in
// stripe-go v76: Stripe added it after the pinned API version.
const (
	EventTypeChargeRefunded      = stripe.EventTypeChargeRefunded      // charge.refunded
	EventTypeChargeRefundUpdated = stripe.EventTypeChargeRefundUpdated // charge.refund.updated
	EventTypeRefundCreated       = stripe.EventTypeRefundCreated       // refund.created
	EventTypeRefundUpdated       = stripe.EventTypeRefundUpdated       // refund.updated
	EventTypeRefundFailed        = stripe.EventType("refund.failed")
)

// WebhookOptions configures webhook delivery to one endpoint (see
// EnableWebhooks).
//
// Which events are sent follows the API version stripe-go v76 pins
// (stripe.APIVersion, 2023-10-16), where a refund of a charge is announced
// with charge.refunded (the charge object, on creation) and
// charge.refund.updated (the refund object, on every status change,
// failure included); Stripe sends refund.created, refund.updated and
// refund.failed for charge refunds only from API version 2024-10-28.acacia
// on. RefundEvents adds those.
type WebhookOptions struct {
	// URL is the endpoint every event is POSTed to. Required.
	URL string
	// Secret is the endpoint's signing secret ("whsec_..."): each delivery
	// carries Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256(Secret,
	// "<t>.<payload>")>. Required.
	Secret string
	// PreviousSecret, when set, adds a second v1 signature computed with it,
	// as Stripe does while a rolled secret's old one has not expired yet.
	PreviousSecret string
	// RefundEvents also sends refund.created, refund.updated and
	// refund.failed (default false: only the charge.* events of the pinned
	// API version).
	RefundEvents bool

	// Delay is waited before the first attempt of each delivery (default 0).
	Delay time.Duration
	// DuplicateRate is the probability in [0,1] that an event is delivered
	// twice (two deliveries, same id and payload, each signed anew).
	DuplicateRate float64
	// ReorderRate is the probability in [0,1] that an event is held back and
	// delivered right after the next event that is delivered; a held event
	// is also delivered by FlushWebhooks and Close, so none is lost. While
	// one event is held no other is.
	ReorderRate float64
	// DropRate is the probability in [0,1] that an event is never delivered;
	// it is recorded (WebhookStats.DroppedIDs, WebhookEvent.Dropped) and can
	// be sent later with ResendWebhook.
	DropRate float64
	// Synchronous makes every action that emits events (a refund create,
	// DashboardRefund, FailRefund, SucceedRefund, ResendWebhook) return only
	// once its deliveries are done, retries included (an event held back for
	// reordering excepted; the held event is waited for by the action that
	// releases it). A refund create then delivers its events before its API
	// response is written. Default false: deliveries go from a goroutine, in
	// emission order, and FlushWebhooks waits for them.
	Synchronous bool

	// MaxAttempts bounds the attempts of each delivery: an answer other
	// than 2xx, or no answer, is retried until then (default
	// DefaultWebhookMaxAttempts). A retry goes to the back of the queue, so
	// later events are not held up by it.
	MaxAttempts int
	// Backoff is the wait before the first retry, doubled for each next one
	// up to MaxWebhookBackoff (default DefaultWebhookBackoff; a negative
	// value retries without waiting, for tests). Once the server is closed
	// remaining retries are made without waiting.
	Backoff time.Duration
	// HTTPClient sends the deliveries (default: a client with
	// DefaultWebhookTimeout).
	HTTPClient *http.Client
	// Now is the clock for event creation times and signature timestamps
	// (default time.Now); a test can sign with a stale timestamp with it.
	Now func() time.Time
}

func (o *WebhookOptions) validate() error {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("stripetest: WebhookOptions.URL must be an absolute http(s) URL, got %q", o.URL)
	}
	if o.Secret == "" {
		return errors.New("stripetest: WebhookOptions.Secret is required")
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"DuplicateRate", o.DuplicateRate}, {"ReorderRate", o.ReorderRate}, {"DropRate", o.DropRate}} {
		if r.v < 0 || r.v > 1 {
			return fmt.Errorf("stripetest: WebhookOptions.%s must be within [0,1], got %v", r.name, r.v)
		}
	}
	if o.Delay < 0 {
		return fmt.Errorf("stripetest: WebhookOptions.Delay must not be negative, got %v", o.Delay)
	}
	if o.MaxAttempts < 0 {
		return fmt.Errorf("stripetest: WebhookOptions.MaxAttempts must not be negative, got %d", o.MaxAttempts)
	}
	return nil
}

// webhooks is the delivery state; guarded by Server.mu.
type webhooks struct {
	cfg     WebhookOptions // normalized
	rng     *mrand.Rand
	started bool
	stopped bool          // the worker has exited (after Close)
	wake    chan struct{} // buffered 1: new work for the worker
	done    chan struct{} // closed when the worker exits
	changed chan struct{} // closed and replaced on every state change

	events   []*whEvent
	byID     map[string]*whEvent
	queue    []*delivery
	held     []*delivery // an event held back for reordering (its copies)
	inflight int

	attempts       int
	delivered      int
	byType         map[string]int
	byEventID      map[string]int
	failedAttempts int
	gaveUp         []string
	dropped        []string
	duplicated     int
	reordered      int
}

type whEvent struct {
	id, typ, objectID string
	payload           []byte
	dropped           bool
	duplicated        bool
	reordered         bool
	attempts          int
	delivered         int
	gaveUp            int
}

type delivery struct {
	ev       *whEvent
	attempts int
	due      time.Time
	done     chan struct{} // closed when delivered or given up
}

// EnableWebhooks starts (or reconfigures) webhook delivery. Events emitted
// before the first call are not sent, as with an endpoint created later. A
// later call replaces the configuration (to roll the secret, say); events
// already queued are delivered under the new one. Fault decisions use a
// random source seeded from Options.Seed, separate from the API faults'.
func (s *Server) EnableWebhooks(o WebhookOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultWebhookMaxAttempts
	}
	if o.Backoff == 0 {
		o.Backoff = DefaultWebhookBackoff
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: DefaultWebhookTimeout}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		return errors.New("stripetest: EnableWebhooks after Close")
	default:
	}
	w := &s.wh
	w.cfg = o
	if !w.started {
		w.started = true
		w.rng = mrand.New(mrand.NewPCG(uint64(s.seed)^0x5851f42d4c957f2d, uint64(s.seed)+0x14057b7ef767814f))
		w.wake = make(chan struct{}, 1)
		w.done = make(chan struct{})
		w.changed = make(chan struct{})
		w.byID = map[string]*whEvent{}
		w.byType = map[string]int{}
		w.byEventID = map[string]int{}
		go s.deliverLoop()
	}
	return nil
}

// eventRequest is an event's "request": null members for events no API
// request caused.
type eventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

type eventData struct {
	Object             any            `json:"object"`
	PreviousAttributes map[string]any `json:"previous_attributes,omitempty"`
}

type eventObject struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            eventData    `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int64        `json:"pending_webhooks"`
	Request         eventRequest `json:"request"`
	Type            string       `json:"type"`
}

// emitLocked renders an event now and decides its faults; it returns the
// deliveries a synchronous caller waits for. reqID and key are "" for
// events no API request caused (key "" also for a request without one).
func (s *Server) emitLocked(typ stripe.EventType, objectID string, object any, prev map[string]any, reqID, key string) []*delivery {
	w := &s.wh
	if !w.started {
		return nil
	}
	ev := eventObject{
		ID:              newID("evt_"),
		Object:          "event",
		APIVersion:      stripe.APIVersion,
		Created:         w.cfg.Now().Unix(),
		Data:            eventData{Object: object, PreviousAttributes: prev},
		PendingWebhooks: 1,
		Type:            string(typ),
	}
	if reqID != "" {
		ev.Request.ID = &reqID
		if key != "" {
			ev.Request.IdempotencyKey = &key
		}
	}
	payload, err := json.MarshalIndent(ev, "", "  ") // Stripe sends it indented
	if err != nil {
		panic(err)
	}
	e := &whEvent{id: ev.ID, typ: ev.Type, objectID: objectID, payload: payload}
	w.events = append(w.events, e)
	w.byID[e.id] = e
	defer s.whChangedLocked()

	// Always roll all three, so that one decision does not shift the others.
	drop := w.cfg.DropRate > 0 && w.rng.Float64() < w.cfg.DropRate
	dup := w.cfg.DuplicateRate > 0 && w.rng.Float64() < w.cfg.DuplicateRate
	reorder := w.cfg.ReorderRate > 0 && w.rng.Float64() < w.cfg.ReorderRate
	if drop {
		e.dropped = true
		w.dropped = append(w.dropped, e.id)
		return nil
	}
	copies := []*delivery{s.newDeliveryLocked(e)}
	if dup {
		e.duplicated = true
		w.duplicated++
		copies = append(copies, s.newDeliveryLocked(e))
	}
	if reorder && len(w.held) == 0 && !w.stopped {
		e.reordered = true
		w.reordered++
		w.held = copies
		return nil
	}
	wait := s.enqueueLocked(copies...)
	if len(w.held) > 0 {
		wait = append(wait, s.enqueueLocked(w.held...)...)
		w.held = nil
	}
	return wait
}

func (s *Server) newDeliveryLocked(e *whEvent) *delivery {
	return &delivery{ev: e, done: make(chan struct{})}
}

// enqueueLocked queues deliveries for the worker; after the worker has
// stopped they are left undelivered (and done).
func (s *Server) enqueueLocked(ds ...*delivery) []*delivery {
	w := &s.wh
	if w.stopped {
		for _, d := range ds {
			close(d.done)
		}
		return nil
	}
	w.queue = append(w.queue, ds...)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return ds
}

func (s *Server) whChangedLocked() {
	if s.wh.changed != nil {
		close(s.wh.changed)
		s.wh.changed = make(chan struct{})
	}
}

// waitDeliveries waits, when delivery is synchronous, for ds.
func (s *Server) waitDeliveries(ctx context.Context, ds []*delivery) {
	s.mu.Lock()
	sync := s.wh.cfg.Synchronous
	s.mu.Unlock()
	if !sync {
		return
	}
	for _, d := range ds {
		select {
		case <-d.done:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// deliverLoop is the one delivery worker: it takes the first due delivery
// in queue order and exits once the server is closed and the queue empty.
func (s *Server) deliverLoop() {
	w := &s.wh
	defer close(w.done)
	for {
		s.mu.Lock()
		closed := s.isClosed()
		if closed && len(w.held) > 0 {
			s.enqueueLocked(w.held...)
			w.held = nil
		}
		now := time.Now()
		pick := -1
		var earliest time.Time
		for i, d := range w.queue {
			if closed || !d.due.After(now) {
				pick = i
				break
			}
			if earliest.IsZero() || d.due.Before(earliest) {
				earliest = d.due
			}
		}
		if pick < 0 {
			if closed {
				w.stopped = true
				s.whChangedLocked()
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			var timer *time.Timer
			var due <-chan time.Time
			if !earliest.IsZero() {
				timer = time.NewTimer(time.Until(earliest))
				due = timer.C
			}
			select {
			case <-w.wake:
			case <-due:
			case <-s.closed:
			}
			if timer != nil {
				timer.Stop()
			}
			continue
		}
		d := w.queue[pick]
		w.queue = slices.Delete(w.queue, pick, pick+1)
		w.inflight++
		cfg := w.cfg
		s.mu.Unlock()

		if d.attempts == 0 && cfg.Delay > 0 {
			t := time.NewTimer(cfg.Delay)
			select {
			case <-t.C:
			case <-s.closed:
			}
			t.Stop()
		}
		ok := s.attempt(cfg, d.ev)

		s.mu.Lock()
		w.inflight--
		d.attempts++
		d.ev.attempts++
		w.attempts++
		switch {
		case ok:
			d.ev.delivered++
			w.delivered++
			w.byType[d.ev.typ]++
			w.byEventID[d.ev.id]++
			close(d.done)
		case d.attempts >= cfg.MaxAttempts:
			w.failedAttempts++
			d.ev.gaveUp++
			w.gaveUp = append(w.gaveUp, d.ev.id)
			close(d.done)
		default:
			w.failedAttempts++
			d.due = time.Now().Add(backoff(cfg.Backoff, d.attempts))
			w.queue = append(w.queue, d)
		}
		s.whChangedLocked()
		s.mu.Unlock()
	}
}

// backoff is the wait before retry n (n >= 1).
func backoff(base time.Duration, n int) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < n && d < MaxWebhookBackoff; i++ {
		d *= 2
	}
	return min(d, MaxWebhookBackoff)
}

// SignatureHeader returns a Stripe-Signature header value for payload
// signed at t with each secret (one v1 entry per secret, in order).
func SignatureHeader(t time.Time, payload []byte, secrets ...string) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(t.Unix(), 10))
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, []byte(secret))
		fmt.Fprintf(mac, "%d.", t.Unix())
		mac.Write(payload)
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// attempt POSTs the event once and reports whether it got a 2xx answer.
func (s *Server) attempt(cfg WebhookOptions, e *whEvent) bool {
	secrets := []string{cfg.Secret}
	if cfg.PreviousSecret != "" {
		secrets = append(secrets, cfg.PreviousSecret)
	}
	req, err := http.NewRequest(http.MethodPost, cfg.URL, strings.NewReader(string(e.payload)))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Cache-Control", "no-cache")
	req.Header.Set("Accept", "*/*; q=0.5, application/xml")
	req.Header.Set("Stripe-Signature", SignatureHeader(cfg.Now(), e.payload, secrets...))
	resp, err := cfg.HTTPClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// FlushWebhooks delivers an event held back for reordering and waits until
// every delivery queued so far is done (delivered or given up). It returns
// ctx's error if ctx ends first, and nil at once when webhooks are off.
func (s *Server) FlushWebhooks(ctx context.Context) error {
	s.mu.Lock()
	w := &s.wh
	if !w.started {
		s.mu.Unlock()
		return nil
	}
	if len(w.held) > 0 {
		s.enqueueLocked(w.held...)
		w.held = nil
		s.whChangedLocked()
	}
	for len(w.queue) > 0 || w.inflight > 0 {
		ch := w.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return nil
}

// closeWebhooks waits for the worker to deliver what is queued or held and
// exit; called by Close after s.closed is closed.
func (s *Server) closeWebhooks() {
	s.mu.Lock()
	started, done, wake := s.wh.started, s.wh.done, s.wh.wake
	s.mu.Unlock()
	if !started {
		return
	}
	select {
	case wake <- struct{}{}:
	default:
	}
	<-done
}

// ResendWebhook queues event id again (a dropped one too), as the
// dashboard's "Resend" does; it is signed anew. With Synchronous delivery
// it returns once the delivery is done.
func (s *Server) ResendWebhook(ctx context.Context, id string) error {
	s.mu.Lock()
	e := s.wh.byID[id]
	if e == nil {
		s.mu.Unlock()
		return fmt.Errorf("stripetest: no such event: %q", id)
	}
	ds := s.enqueueLocked(s.newDeliveryLocked(e))
	s.whChangedLocked()
	s.mu.Unlock()
	s.waitDeliveries(ctx, ds)
	return nil
}

// WebhookEvent is one event the server emitted and what became of it.
type WebhookEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// ObjectID is the id of data.object (a refund or a charge).
	ObjectID string `json:"object_id"`
	// Payload is the exact body every delivery of the event carries.
	Payload    json.RawMessage `json:"payload"`
	Dropped    bool            `json:"dropped"`
	Duplicated bool            `json:"duplicated"`
	Reordered  bool            `json:"reordered"`
	// Attempts counts POSTs of the event (copies and retries included);
	// Delivered the 2xx answers; GaveUp the deliveries given up.
	Attempts  int `json:"attempts"`
	Delivered int `json:"delivered"`
	GaveUp    int `json:"gave_up"`
}

// WebhookEvents returns every event emitted since EnableWebhooks, in
// emission order.
func (s *Server) WebhookEvents() []WebhookEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WebhookEvent, 0, len(s.wh.events))
	for _, e := range s.wh.events {
		out = append(out, WebhookEvent{
			ID: e.id, Type: e.typ, ObjectID: e.objectID, Payload: slices.Clone(e.payload),
			Dropped: e.dropped, Duplicated: e.duplicated, Reordered: e.reordered,
			Attempts: e.attempts, Delivered: e.delivered, GaveUp: e.gaveUp,
		})
	}
	return out
}

// WebhookStats counts webhook deliveries; JSON as in GET /_stats
// ("webhooks") and GET /_webhooks.
type WebhookStats struct {
	Enabled bool `json:"enabled"`
	// Emitted counts events created (dropped ones included).
	Emitted int `json:"emitted"`
	// Attempts counts POSTs; Delivered the 2xx answers (duplicates, resends
	// counted), also per event type and per event id.
	Attempts        int            `json:"attempts"`
	Delivered       int            `json:"delivered"`
	DeliveredByType map[string]int `json:"delivered_by_type"`
	DeliveredByID   map[string]int `json:"delivered_by_id"`
	// FailedAttempts counts attempts answered other than 2xx or not at all;
	// GaveUpIDs lists an event id per delivery given up after MaxAttempts.
	FailedAttempts int      `json:"failed_attempts"`
	GaveUpIDs      []string `json:"gave_up_ids"`
	// DroppedIDs lists the events never sent (DropRate).
	DroppedIDs []string `json:"dropped_ids"`
	Duplicated int      `json:"duplicated"`
	Reordered  int      `json:"reordered"`
	// Pending counts deliveries queued, in flight or held back.
	Pending int `json:"pending"`
}

func (s *Server) webhookStatsLocked() WebhookStats {
	w := &s.wh
	st := WebhookStats{
		Enabled:         w.started,
		Emitted:         len(w.events),
		Attempts:        w.attempts,
		Delivered:       w.delivered,
		DeliveredByType: cloneMap(w.byType),
		DeliveredByID:   cloneMap(w.byEventID),
		FailedAttempts:  w.failedAttempts,
		GaveUpIDs:       slices.Clone(w.gaveUp),
		DroppedIDs:      slices.Clone(w.dropped),
		Duplicated:      w.duplicated,
		Reordered:       w.reordered,
		Pending:         len(w.queue) + w.inflight + len(w.held),
	}
	if st.GaveUpIDs == nil {
		st.GaveUpIDs = []string{}
	}
	if st.DroppedIDs == nil {
		st.DroppedIDs = []string{}
	}
	return st
}

// WebhookStats returns a snapshot of the webhook counters.
func (s *Server) WebhookStats() WebhookStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhookStatsLocked()
}
