package stripetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// apiError is the body of Stripe's {"error": {...}}.
type apiError struct {
	Type        string `json:"type"`
	Code        string `json:"code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message"`
	Param       string `json:"param,omitempty"`
	Charge      string `json:"charge,omitempty"`
}

func (e apiError) body() []byte {
	b, _ := json.Marshal(map[string]apiError{"error": e})
	return b
}

func invalidRequest(code, param, msg string) *apiError {
	return &apiError{Type: string(stripe.ErrorTypeInvalidRequest), Code: code, Param: param, Message: msg}
}

// ServeHTTP serves Stripe's refund endpoints (POST /v1/refunds, GET
// /v1/refunds, GET /v1/refunds/{id}) and the control endpoints under /_
// listed in the package documentation.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_") {
		s.serveControl(w, r)
		return
	}
	isCreate := r.Method == http.MethodPost && r.URL.Path == "/v1/refunds"
	s.mu.Lock()
	s.requests++
	if isCreate {
		s.refundCreates++
	}
	s.mu.Unlock()

	reqID := newID("req_")
	switch {
	case isCreate:
		s.createRefund(w, r, reqID)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds":
		if s.authorized(w, r, reqID) {
			s.listRefunds(w, r, reqID)
		}
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/refunds/") &&
		!strings.Contains(strings.TrimPrefix(r.URL.Path, "/v1/refunds/"), "/"):
		if s.authorized(w, r, reqID) {
			s.getRefund(w, r, strings.TrimPrefix(r.URL.Path, "/v1/refunds/"), reqID)
		}
	default:
		writeJSON(w, r, reqID, http.StatusNotFound, invalidRequest("", "",
			fmt.Sprintf("Unrecognized request URL (%s: %s). stripetest serves POST /v1/refunds, GET /v1/refunds and GET /v1/refunds/{id}.", r.Method, r.URL.Path)).body())
	}
}

func writeJSON(w http.ResponseWriter, r *http.Request, reqID string, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Request-Id", reqID)
	if v := r.Header.Get("Stripe-Version"); v != "" {
		h.Set("Stripe-Version", v)
	} else {
		h.Set("Stripe-Version", stripe.APIVersion)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// authorized checks the secret key and answers 401 itself when it fails.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, reqID string) bool {
	var key string
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		key = strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))
	} else if u, _, ok := r.BasicAuth(); ok {
		key = u
	}
	var msg string
	switch {
	case key == "":
		msg = "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."
	case !strings.HasPrefix(key, "sk_") || (s.opts.APIKey != "" && key != s.opts.APIKey):
		msg = "Invalid API Key provided: " + redactKey(key)
	default:
		return true
	}
	writeJSON(w, r, reqID, http.StatusUnauthorized, invalidRequest("", "", msg).body())
	return false
}

func redactKey(k string) string {
	if len(k) <= 8 {
		return strings.Repeat("*", len(k))
	}
	return k[:7] + strings.Repeat("*", len(k)-11) + k[len(k)-4:]
}

// sleep waits d unless the request or the server ends first.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closed:
		return false
	}
}

func injectedError(status int) *apiError {
	switch status {
	case http.StatusTooManyRequests:
		return invalidRequest(string(stripe.ErrorCodeRateLimit), "", "Too many requests hit the API too quickly (injected by stripetest).")
	case http.StatusConflict:
		return invalidRequest(string(stripe.ErrorCodeLockTimeout), "", "This object cannot be accessed right now because another API request or Stripe process is currently accessing it (injected by stripetest).")
	}
	return &apiError{Type: string(stripe.ErrorTypeAPI), Message: fmt.Sprintf("An unknown error occurred (HTTP %d injected by stripetest).", status)}
}

type createParams struct {
	charge    string
	amount    int64
	hasAmount bool
	currency  string
	reason    string
	metadata  map[string]string
}

var refundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

// parseCreate validates a refund create's parameters as Stripe's request
// validation does: a failure here is answered before the endpoint executes,
// so it is not stored under the idempotency key.
func parseCreate(form url.Values) (*createParams, *apiError) {
	p := &createParams{metadata: map[string]string{}}
	for name, vals := range form {
		v := ""
		if len(vals) > 0 {
			v = vals[len(vals)-1]
		}
		switch {
		case name == "charge":
			if v == "" {
				return nil, invalidRequest("parameter_invalid_empty", "charge", "You passed an empty string for 'charge'. We assume empty values are an attempt to unset a parameter; however 'charge' cannot be unset. You should remove 'charge' from your request or supply a non-empty value.")
			}
			p.charge = v
		case name == "amount":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, invalidRequest("parameter_invalid_integer", "amount", "Invalid integer: "+v)
			}
			if n < 1 {
				return nil, invalidRequest("parameter_invalid_integer", "amount", "This value must be greater than or equal to 1.")
			}
			p.amount, p.hasAmount = n, true
		case name == "currency":
			p.currency = strings.ToLower(v)
		case name == "reason":
			if v != "" && !refundReasons[v] {
				return nil, invalidRequest("", "reason", "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer")
			}
			p.reason = v
		case name == "payment_intent":
			return nil, invalidRequest("", "payment_intent", "stripetest only refunds charges: pass 'charge', not 'payment_intent'.")
		case name == "metadata" && v == "":
			// "unset all metadata": nothing to unset on create
		case strings.HasPrefix(name, "metadata[") && strings.HasSuffix(name, "]"):
			k := name[len("metadata[") : len(name)-1]
			switch {
			case k == "" || strings.ContainsAny(k, "[]"):
				return nil, invalidRequest("parameter_unknown", name, "Invalid metadata key: "+name)
			case len(k) > 40:
				return nil, invalidRequest("", name, "Metadata keys can have up to 40 characters. You passed in a key that was "+strconv.Itoa(len(k))+" characters.")
			case len(v) > 500:
				return nil, invalidRequest("", name, "Metadata values can have up to 500 characters, but you passed in a value that is "+strconv.Itoa(len(v))+" characters.")
			}
			if v != "" {
				p.metadata[k] = v
			}
		case name == "expand" || strings.HasPrefix(name, "expand["):
			// accepted and ignored
		default:
			return nil, invalidRequest("parameter_unknown", name, "Received unknown parameter: "+name)
		}
	}
	if len(p.metadata) > 50 {
		return nil, invalidRequest("", "metadata", "You can have up to 50 metadata keys.")
	}
	if p.charge == "" {
		return nil, invalidRequest("parameter_missing", "", "One of the following params should be provided for this request: payment_intent or charge.")
	}
	return p, nil
}

func (s *Server) createRefund(w http.ResponseWriter, r *http.Request, reqID string) {
	if !s.sleep(r.Context(), s.opts.Delay) {
		writeJSON(w, r, reqID, http.StatusServiceUnavailable, injectedError(http.StatusServiceUnavailable).body())
		return
	}
	if !s.authorized(w, r, reqID) {
		return
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))

	s.mu.Lock()
	switch {
	case key == "":
		s.missingKey++
	case !strings.HasPrefix(key, OurKeyPrefix) && !s.foreignSeen[key]:
		s.foreignSeen[key] = true
		s.foreignKeys = append(s.foreignKeys, key)
	}
	failStatus := 0
	if len(s.failNext) > 0 {
		failStatus, s.failNext = s.failNext[0], s.failNext[1:]
	} else if s.opts.ErrorRate > 0 && s.rng.Float64() < s.opts.ErrorRate {
		failStatus = http.StatusInternalServerError
	}
	if failStatus != 0 {
		s.injectedErrors++
	}
	s.mu.Unlock()
	if failStatus != 0 {
		writeJSON(w, r, reqID, failStatus, injectedError(failStatus).body())
		return
	}

	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		writeJSON(w, r, reqID, http.StatusBadRequest, invalidRequest("", "", "Invalid request body: "+err.Error()).body())
		return
	}
	form := r.PostForm
	fingerprint := form.Encode() // sorted by name: the parameters, not their order

	// Stripe's idempotency layer.
	var entry *keyEntry
	if key != "" {
		s.mu.Lock()
		e, ok := s.keys[key]
		switch {
		case ok && e.path != r.URL.Path:
			s.keyMismatch++
			s.mu.Unlock()
			writeJSON(w, r, reqID, http.StatusBadRequest, (&apiError{Type: string(stripe.ErrorTypeIdempotency),
				Message: fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were first used for ('%s' vs '%s'). Try using a key other than '%s' if you meant to execute a different request.", e.path, r.URL.Path, key)}).body())
			return
		case ok && e.fingerprint != fingerprint:
			s.keyMismatch++
			s.mu.Unlock()
			writeJSON(w, r, reqID, http.StatusBadRequest, (&apiError{Type: string(stripe.ErrorTypeIdempotency),
				Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", key)}).body())
			return
		case ok && !e.done:
			s.keyInUse++
			s.mu.Unlock()
			writeJSON(w, r, reqID, http.StatusConflict, invalidRequest(string(stripe.ErrorCodeIdempotencyKeyInUse), "",
				fmt.Sprintf("There is currently another in-progress request using this idempotent key (that probably means you submitted twice, and the other request is still going through): %s. Please try again later.", key)).body())
			return
		case ok:
			s.replays++
			status, body, orig := e.status, e.body, e.requestID
			drop := s.rollDropLocked()
			s.mu.Unlock()
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Original-Request", orig)
			s.finish(w, r, reqID, key, status, body, drop)
			return
		}
		entry = &keyEntry{fingerprint: fingerprint, path: r.URL.Path}
		s.keys[key] = entry
		s.mu.Unlock()
	}

	p, verr := parseCreate(form)
	if verr != nil {
		if entry != nil {
			s.mu.Lock()
			if s.keys[key] == entry {
				delete(s.keys, key)
			}
			s.mu.Unlock()
		}
		writeJSON(w, r, reqID, http.StatusBadRequest, verr.body())
		return
	}

	s.mu.Lock()
	status, body, ref := s.executeLocked(p, key)
	var events []*delivery
	if ref != nil {
		events = s.emitRefundCreatedLocked(ref, reqID, key)
	}
	var h *hold
	if ref != nil && len(s.holds) > 0 {
		h, s.holds = s.holds[0], s.holds[1:]
		h.refundID, h.key, h.chargeID = ref.ID, key, ref.Charge
		s.held++
		close(h.appliedDone)
	}
	s.mu.Unlock()
	s.waitDeliveries(r.Context(), events)

	if h != nil {
		h.applied <- ref.ID // buffered, sent once
		select {
		case <-h.release:
		case <-r.Context().Done():
		case <-s.closed:
		}
	}

	s.mu.Lock()
	if entry != nil {
		entry.done, entry.status, entry.body, entry.requestID = true, status, body, reqID
	}
	drop := s.rollDropLocked()
	s.mu.Unlock()
	s.finish(w, r, reqID, key, status, body, drop)
}

func (s *Server) rollDropLocked() bool {
	switch {
	case s.dropNext > 0:
		s.dropNext--
	case s.opts.DropRate > 0 && s.rng.Float64() < s.opts.DropRate:
	default:
		return false
	}
	s.dropped++
	return true
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request, reqID, key string, status int, body []byte, drop bool) {
	if drop {
		dropResponse(w)
		return
	}
	if key != "" {
		w.Header().Set("Idempotency-Key", key)
	}
	writeJSON(w, r, reqID, status, body)
}

// dropResponse loses the response: it writes the start of a status line
// and closes the connection. Not a silent close, because Go's transport
// transparently resends a request carrying an Idempotency-Key when a reused
// connection closes before any response byte arrives; with a byte read,
// every client sees the loss (Go: unexpected EOF; curl: empty reply).
func dropResponse(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_, _ = buf.WriteString("HTTP/1.1 ")
	_ = buf.Flush()
	_ = conn.Close()
}

// executeLocked runs the endpoint: what it answers is stored under the key.
func (s *Server) executeLocked(p *createParams, key string) (int, []byte, *refund) {
	if ce := s.chargeErrs[p.charge]; ce != nil {
		e := apiError{Type: ce.Type, Code: ce.Code, Charge: p.charge,
			Message: fmt.Sprintf("The refund of charge %s was refused (%s).", p.charge, ce.Code)}
		if ce.Type == string(stripe.ErrorTypeCard) {
			e.Message = "Your card was declined."
			if ce.Code == string(stripe.ErrorCodeCardDeclined) {
				e.DeclineCode = "generic_decline"
			}
		}
		return ce.HTTPStatus, e.body(), nil
	}
	c := s.charges[p.charge]
	if c == nil && s.opts.AutoChargeAmount > 0 && strings.HasPrefix(p.charge, "ch_") {
		c = newCharge(p.charge, s.opts.AutoChargeAmount, "usd")
		s.charges[p.charge] = c
	}
	if c == nil {
		return http.StatusBadRequest, invalidRequest(string(stripe.ErrorCodeResourceMissing), "charge",
			fmt.Sprintf("No such charge: '%s'", p.charge)).body(), nil
	}
	if p.currency != "" && p.currency != c.currency {
		return http.StatusBadRequest, invalidRequest("", "currency",
			fmt.Sprintf("The currency %s does not match the currency of charge %s (%s).", p.currency, c.id, c.currency)).body(), nil
	}
	remaining := c.amount - c.refunded
	if remaining <= 0 {
		return http.StatusBadRequest, invalidRequest(string(stripe.ErrorCodeChargeAlreadyRefunded), "",
			fmt.Sprintf("Charge %s has already been refunded.", c.id)).body(), nil
	}
	amount := remaining
	if p.hasAmount {
		amount = p.amount
	}
	if amount > remaining {
		return http.StatusBadRequest, invalidRequest(string(stripe.ErrorCodeAmountTooLarge), "amount",
			fmt.Sprintf("Refund amount (%s) is greater than unrefunded amount on charge (%s)", money(amount, c.currency), money(remaining, c.currency))).body(), nil
	}
	ref := &refund{
		ID:             newID("re_"),
		Charge:         c.id,
		Amount:         amount,
		Currency:       c.currency,
		Reason:         p.reason,
		Metadata:       p.metadata,
		IdempotencyKey: key,
		Created:        time.Now().Unix(),
		Status:         stripe.RefundStatusSucceeded,
		receipt:        newDigits(4) + "-" + newDigits(4),
		arn:            newDigits(23),
		txn:            newID("txn_"),
	}
	if s.pendNext > 0 {
		s.pendNext--
		ref.Status = stripe.RefundStatusPending
	}
	c.refunded += amount
	s.refunds = append(s.refunds, ref)
	s.refundByID[ref.ID] = ref
	s.refundsByChg[c.id]++
	if key != "" {
		s.refundsByKey[key]++
	}
	return http.StatusOK, ref.json(), ref
}

func money(cents int64, currency string) string {
	if currency == "usd" {
		return fmt.Sprintf("$%d.%02d", cents/100, cents%100)
	}
	return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, strings.ToUpper(currency))
}

// refundObject is the refund as the API renders it, with the sensitive
// looking fields a redaction test needs.
type refundObject struct {
	ID                     string            `json:"id"`
	Object                 string            `json:"object"`
	Amount                 int64             `json:"amount"`
	BalanceTransaction     string            `json:"balance_transaction"`
	Charge                 string            `json:"charge"`
	Created                int64             `json:"created"`
	Currency               string            `json:"currency"`
	DestinationDetails     any               `json:"destination_details"`
	Metadata               map[string]string `json:"metadata"`
	PaymentIntent          *string           `json:"payment_intent"`
	PaymentMethodDetails   any               `json:"payment_method_details"`
	Reason                 *string           `json:"reason"`
	ReceiptNumber          string            `json:"receipt_number"`
	SourceTransferReversal *string           `json:"source_transfer_reversal"`
	Status                 string            `json:"status"`
	TransferReversal       *string           `json:"transfer_reversal"`
	// Present only on a failed refund, as in Stripe's API.
	FailureBalanceTransaction string `json:"failure_balance_transaction,omitempty"`
	FailureReason             string `json:"failure_reason,omitempty"`
}

func (r *refund) object() refundObject {
	o := refundObject{
		ID:                 r.ID,
		Object:             "refund",
		Amount:             r.Amount,
		BalanceTransaction: r.txn,
		Charge:             r.Charge,
		Created:            r.Created,
		Currency:           r.Currency,
		DestinationDetails: map[string]any{
			"type": "card",
			"card": map[string]any{
				"reference":        r.arn,
				"reference_status": "available",
				"reference_type":   "acquirer_reference_number",
				"type":             "refund",
			},
		},
		Metadata: cloneMap(r.Metadata),
		PaymentMethodDetails: map[string]any{
			"type": "card",
			"card": map[string]any{"last4": "4242", "brand": "visa", "fingerprint": "fp_secret"},
		},
		ReceiptNumber:             r.receipt,
		Status:                    string(r.Status),
		FailureBalanceTransaction: r.failureTxn,
		FailureReason:             string(r.FailureReason),
	}
	if r.Reason != "" {
		o.Reason = &r.Reason
	}
	return o
}

func (r *refund) json() []byte {
	b, _ := json.Marshal(r.object())
	return b
}

func (s *Server) getRefund(w http.ResponseWriter, r *http.Request, id, reqID string) {
	s.mu.Lock()
	ref := s.refundByID[id]
	var body []byte
	if ref != nil {
		body = ref.json()
	}
	s.mu.Unlock()
	if ref == nil {
		writeJSON(w, r, reqID, http.StatusNotFound, invalidRequest(string(stripe.ErrorCodeResourceMissing), "id",
			fmt.Sprintf("No such refund: '%s'", id)).body())
		return
	}
	writeJSON(w, r, reqID, http.StatusOK, body)
}

func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request, reqID string) {
	q := r.URL.Query()
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeJSON(w, r, reqID, http.StatusBadRequest, invalidRequest("parameter_invalid_integer", "limit",
				"This value must be between 1 and 100 (it currently is '"+v+"').").body())
			return
		}
		limit = n
	}
	chargeID := q.Get("charge")
	after, before := q.Get("starting_after"), q.Get("ending_before")

	s.mu.Lock()
	var all []*refund // newest first
	for i := len(s.refunds) - 1; i >= 0; i-- {
		if chargeID == "" || s.refunds[i].Charge == chargeID {
			all = append(all, s.refunds[i])
		}
	}
	index := func(id string) int {
		for i, x := range all {
			if x.ID == id {
				return i
			}
		}
		return -1
	}
	var page []*refund
	hasMore := false
	var cursorErr *apiError
	switch {
	case after != "":
		i := index(after)
		if i < 0 {
			cursorErr = invalidRequest(string(stripe.ErrorCodeResourceMissing), "starting_after", fmt.Sprintf("No such refund: '%s'", after))
			break
		}
		rest := all[i+1:]
		hasMore = len(rest) > limit
		page = rest[:min(limit, len(rest))]
	case before != "":
		i := index(before)
		if i < 0 {
			cursorErr = invalidRequest(string(stripe.ErrorCodeResourceMissing), "ending_before", fmt.Sprintf("No such refund: '%s'", before))
			break
		}
		rest := all[:i]
		hasMore = len(rest) > limit
		page = rest[max(0, len(rest)-limit):]
	default:
		hasMore = len(all) > limit
		page = all[:min(limit, len(all))]
	}
	data := make([]refundObject, 0, len(page))
	for _, x := range page {
		data = append(data, x.object())
	}
	s.mu.Unlock()
	if cursorErr != nil {
		writeJSON(w, r, reqID, http.StatusBadRequest, cursorErr.body())
		return
	}
	body, _ := json.Marshal(map[string]any{"object": "list", "data": data, "has_more": hasMore, "url": "/v1/refunds"})
	writeJSON(w, r, reqID, http.StatusOK, body)
}
