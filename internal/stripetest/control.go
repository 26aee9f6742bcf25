package stripetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// ChargeSpec is one charge for POST /_charges. Fail, when set, is applied
// as with SetChargeError.
type ChargeSpec struct {
	ID       string       `json:"id"`
	Amount   int64        `json:"amount"`
	Currency string       `json:"currency,omitempty"`
	Fail     *ChargeError `json:"fail,omitempty"`
}

// Held is the answer of GET /_held.
type Held struct {
	RefundID       string `json:"refund_id"`
	IdempotencyKey string `json:"idempotency_key"`
	Charge         string `json:"charge"`
}

// serveControl serves the control endpoints listed in the package documentation.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	route := r.Method + " " + r.URL.Path
	q := r.URL.Query()
	switch route {
	case "GET /_stats":
		ctlJSON(w, http.StatusOK, s.Stats())
	case "POST /_charges":
		s.ctlCharges(w, r)
	case "POST /_clear_charge_error":
		id := q.Get("id")
		if id == "" {
			ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "id is required"})
			return
		}
		s.ClearChargeError(id)
		ctlJSON(w, http.StatusOK, map[string]string{"cleared": id})
	case "POST /_hold":
		s.armHold(true)
		s.mu.Lock()
		n := len(s.remoteHolds)
		s.mu.Unlock()
		ctlJSON(w, http.StatusOK, map[string]int{"armed": n})
	case "GET /_held":
		s.ctlHeld(w, r)
	case "POST /_release":
		s.mu.Lock()
		holds := append([]*hold(nil), s.remoteHolds...)
		s.mu.Unlock()
		for _, h := range holds {
			h.doRelease()
		}
		ctlJSON(w, http.StatusOK, map[string]int{"released": len(holds)})
	case "POST /_drop":
		n, ok := ctlInt(w, q.Get("n"), 1)
		if ok {
			s.DropNext(n)
			ctlJSON(w, http.StatusOK, map[string]int{"drop_next": n})
		}
	case "POST /_fail":
		n, ok := ctlInt(w, q.Get("n"), 1)
		if !ok {
			return
		}
		status, ok := ctlInt(w, q.Get("status"), http.StatusInternalServerError)
		if !ok {
			return
		}
		if status < 400 || status > 599 {
			ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "status must be 4xx or 5xx"})
			return
		}
		s.FailNext(n, status)
		ctlJSON(w, http.StatusOK, map[string]int{"fail_next": n, "status": status})
	case "POST /_expire_keys":
		n := 0
		if k := q.Get("key"); k != "" {
			if s.ExpireKey(k) {
				n = 1
			}
		} else {
			n = s.ExpireAllKeys()
		}
		ctlJSON(w, http.StatusOK, map[string]int{"expired": n})
	case "POST /_pend":
		n, ok := ctlInt(w, q.Get("n"), 1)
		if ok {
			s.PendNext(n)
			ctlJSON(w, http.StatusOK, map[string]int{"pend_next": n})
		}
	case "POST /_dashboard_refund":
		var amount int64
		if v := q.Get("amount"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "amount: not a non-negative integer: " + v})
				return
			}
			amount = n
		}
		ref, err := s.DashboardRefund(r.Context(), q.Get("charge"), amount)
		if err != nil {
			ctlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		ctlJSON(w, http.StatusOK, ref)
	case "POST /_fail_refund":
		if err := s.FailRefund(r.Context(), q.Get("id"), stripe.RefundFailureReason(q.Get("reason"))); err != nil {
			ctlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		ctlJSON(w, http.StatusOK, map[string]string{"failed": q.Get("id")})
	case "POST /_succeed_refund":
		if err := s.SucceedRefund(r.Context(), q.Get("id")); err != nil {
			ctlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		ctlJSON(w, http.StatusOK, map[string]string{"succeeded": q.Get("id")})
	case "POST /_webhooks":
		s.ctlWebhooks(w, r)
	case "GET /_webhooks":
		ctlJSON(w, http.StatusOK, s.WebhookStats())
	case "GET /_webhook_events":
		ctlJSON(w, http.StatusOK, s.WebhookEvents())
	case "POST /_webhooks/flush":
		timeout, ok := ctlDuration(w, q.Get("timeout"), 60*time.Second)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		if err := s.FlushWebhooks(ctx); err != nil {
			ctlJSON(w, http.StatusGatewayTimeout, map[string]string{"error": "deliveries still pending: " + err.Error()})
			return
		}
		ctlJSON(w, http.StatusOK, s.WebhookStats())
	case "POST /_webhooks/resend":
		if err := s.ResendWebhook(r.Context(), q.Get("id")); err != nil {
			ctlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		ctlJSON(w, http.StatusOK, map[string]string{"resent": q.Get("id")})
	default:
		ctlJSON(w, http.StatusNotFound, map[string]string{"error": "unknown control endpoint " + route})
	}
}

func ctlJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func ctlInt(w http.ResponseWriter, v string, def int) (int, bool) {
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "not a non-negative integer: " + v})
		return 0, false
	}
	return n, true
}

func (s *Server) ctlCharges(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		ctlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	var specs []ChargeSpec
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		err = json.Unmarshal(b, &specs)
	} else {
		var one ChargeSpec
		err = json.Unmarshal(b, &one)
		specs = []ChargeSpec{one}
	}
	if err != nil {
		ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
		return
	}
	for _, c := range specs {
		if c.ID == "" || c.Amount < 0 {
			ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "each charge needs an id and a non-negative amount"})
			return
		}
	}
	for _, c := range specs {
		s.AddCharge(c.ID, c.Amount, c.Currency)
		if c.Fail != nil {
			s.SetChargeError(c.ID, c.Fail.HTTPStatus, c.Fail.Type, c.Fail.Code)
		}
	}
	ctlJSON(w, http.StatusOK, map[string]int{"added": len(specs)})
}

func (s *Server) ctlHeld(w http.ResponseWriter, r *http.Request) {
	timeout := 60 * time.Second
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "timeout: want a positive duration such as 30s"})
			return
		}
		timeout = d
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		var wait *hold
		for _, h := range s.remoteHolds {
			select {
			case <-h.appliedDone:
				held := Held{RefundID: h.refundID, IdempotencyKey: h.key, Charge: h.chargeID}
				s.mu.Unlock()
				ctlJSON(w, http.StatusOK, held)
				return
			default:
			}
			if wait == nil {
				wait = h
			}
		}
		s.mu.Unlock()
		if wait == nil {
			ctlJSON(w, http.StatusNotFound, map[string]string{"error": "no hold armed: POST /_hold first"})
			return
		}
		select {
		case <-wait.appliedDone:
		case <-wait.release:
		case <-deadline.C:
			ctlJSON(w, http.StatusGatewayTimeout, map[string]string{"error": "no held refund yet"})
			return
		case <-r.Context().Done():
			return
		case <-s.closed:
			ctlJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "server closed"})
			return
		}
	}
}

func ctlDuration(w http.ResponseWriter, v string, def time.Duration) (time.Duration, bool) {
	if v == "" {
		return def, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "want a positive duration such as 30s, got " + v})
		return 0, false
	}
	return d, true
}

// WebhookConfig is the body of POST /_webhooks: WebhookOptions in JSON,
// durations as Go duration strings ("250ms").
type WebhookConfig struct {
	URL            string  `json:"url"`
	Secret         string  `json:"secret"`
	PreviousSecret string  `json:"previous_secret,omitempty"`
	RefundEvents   bool    `json:"refund_events,omitempty"`
	Delay          string  `json:"delay,omitempty"`
	DuplicateRate  float64 `json:"duplicate_rate,omitempty"`
	ReorderRate    float64 `json:"reorder_rate,omitempty"`
	DropRate       float64 `json:"drop_rate,omitempty"`
	Synchronous    bool    `json:"synchronous,omitempty"`
	MaxAttempts    int     `json:"max_attempts,omitempty"`
	Backoff        string  `json:"backoff,omitempty"`
}

// Options converts the configuration; durations must parse.
func (c WebhookConfig) Options() (WebhookOptions, error) {
	o := WebhookOptions{
		URL: c.URL, Secret: c.Secret, PreviousSecret: c.PreviousSecret, RefundEvents: c.RefundEvents,
		DuplicateRate: c.DuplicateRate, ReorderRate: c.ReorderRate, DropRate: c.DropRate,
		Synchronous: c.Synchronous, MaxAttempts: c.MaxAttempts,
	}
	for _, d := range []struct {
		name string
		v    string
		to   *time.Duration
	}{{"delay", c.Delay, &o.Delay}, {"backoff", c.Backoff, &o.Backoff}} {
		if d.v == "" {
			continue
		}
		x, err := time.ParseDuration(d.v)
		if err != nil {
			return WebhookOptions{}, fmt.Errorf("%s: %w", d.name, err)
		}
		*d.to = x
	}
	return o, nil
}

func (s *Server) ctlWebhooks(w http.ResponseWriter, r *http.Request) {
	var c WebhookConfig
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		ctlJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
		return
	}
	o, err := c.Options()
	if err == nil {
		err = s.EnableWebhooks(o)
	}
	if err != nil {
		ctlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctlJSON(w, http.StatusOK, map[string]string{"webhooks": c.URL})
}
