// Package refunds makes Stripe refunds for refund_order with stripe-go v76:
// always with our downstream key as Stripe's Idempotency-Key, the operation
// id and the downstream key in the refund's metadata, stripe-go's own network retries off (ours are
// bounded by the caller's deadline), and errors classified into definitive
// and transient.
package refunds

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sethvargo/go-retry"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/refund"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/telemetry"
	"github.com/idemgate/idemgate/internal/vocab"
)

// MetadataOperationID is the refund metadata key naming our operation: what
// reconciliation looks for once Stripe's 24-hour key window has passed.
const MetadataOperationID = "idemgate_operation_id"

// MetadataDownstreamKey is the refund metadata key naming the downstream
// key (the intent key and its generation): what reconciliation finds a
// refund of the same intent by when the operation that made it was lost
// (its claim's commit did not survive a failover or a restore, and the
// intent was claimed again under a new operation id).
const MetadataDownstreamKey = "idemgate_downstream_key"

// Config configures a Client.
type Config struct {
	// APIKey is Stripe's secret key (STRIPE_API_KEY). Required.
	APIKey string
	// BaseURL is Stripe's API base (STRIPE_API_BASE). Default Stripe's.
	BaseURL string
	// HTTPClient defaults to a client with a 30s timeout; the caller's
	// context deadline is what bounds a call in practice.
	HTTPClient *http.Client
	// InAttemptRetries is how many times a transient error is retried within
	// one attempt (with backoff, inside the caller's deadline). Default 3.
	InAttemptRetries uint64
	// TracerProvider receives a client span per Stripe request. Nil or a
	// no-op provider: none.
	TracerProvider trace.TracerProvider
}

// Client creates and lists refunds.
type Client struct {
	refunds refund.Client
	retries uint64
}

// NewClient returns a Client, or an error naming the missing setting.
func NewClient(cfg *Config) (*Client, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("STRIPE_API_KEY is required for refund_order")
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	hc = traced(hc, cfg.TracerProvider)
	bc := &stripe.BackendConfig{
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(0), // ours, bounded by the lease, not stripe-go's
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	}
	if cfg.BaseURL != "" {
		bc.URL = stripe.String(cfg.BaseURL)
	}
	retries := cfg.InAttemptRetries
	if retries == 0 {
		retries = 3
	}
	return &Client{
		refunds: refund.Client{B: stripe.GetBackendWithConfig(stripe.APIBackend, bc), Key: cfg.APIKey},
		retries: retries,
	}, nil
}

// traced is a copy of hc whose requests are client spans on tp
// ("stripe POST /v1/refunds"), or hc itself when tp is off. No trace
// context is sent to Stripe.
func traced(hc *http.Client, tp trace.TracerProvider) *http.Client {
	if !telemetry.On(tp) {
		return hc
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c := *hc
	c.Transport = otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return "stripe " + r.Method + " " + r.URL.Path
		}),
	)
	return &c
}

// Request is one refund to make.
type Request struct {
	ChargeID    string
	AmountCents int64
	// DownstreamKey is sent as Stripe's Idempotency-Key. Required: without
	// it stripe-go would invent a random key per call.
	DownstreamKey string
	OperationID   string
	TenantID      string
	OrderID       string
	// Reason is free text kept in metadata (Stripe's own reason is an enum).
	Reason string
}

// Refund is the allowlisted view of a Stripe refund that we keep: never
// card details or the full Stripe object.
type Refund struct {
	ID          string `json:"refund_id"`
	ChargeID    string `json:"charge_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
	// OperationID and DownstreamKey are what the refund's metadata names:
	// the operation that made it and its downstream key.
	OperationID   string    `json:"-"`
	DownstreamKey string    `json:"-"`
	Created       time.Time `json:"-"`
	// Replayed is true when Stripe answered from its idempotency cache.
	Replayed bool `json:"-"`
}

// Create makes the refund, retrying transient errors within ctx's deadline.
func (c *Client) Create(ctx context.Context, r *Request) (*Refund, error) {
	if r.DownstreamKey == "" || r.OperationID == "" {
		return nil, errors.New("refunds: DownstreamKey and OperationID are required")
	}
	backoff := retry.WithMaxRetries(c.retries, retry.WithJitter(50*time.Millisecond, retry.NewExponential(100*time.Millisecond)))
	var out *Refund
	err := retry.Do(ctx, backoff, func(ctx context.Context) error {
		params := &stripe.RefundParams{
			Params: stripe.Params{
				Context:        ctx,
				IdempotencyKey: stripe.String(r.DownstreamKey),
			},
			Metadata: map[string]string{
				MetadataOperationID:   r.OperationID,
				MetadataDownstreamKey: r.DownstreamKey,
				"idemgate_tenant":     r.TenantID,
				"idemgate_order_id":   r.OrderID,
			},
			Charge: stripe.String(r.ChargeID),
			Amount: stripe.Int64(r.AmountCents),
		}
		if r.Reason != "" {
			params.Metadata["idemgate_reason"] = truncate(r.Reason, 500)
		}
		re, err := c.refunds.New(params)
		if err != nil {
			if _, permanent := Classify(err); !permanent {
				return retry.RetryableError(err)
			}
			return err
		}
		out = view(re)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FindByOperation lists the charge's refunds and returns the one whose
// metadata names operationID, or vocab.ErrNotFound. Stripe cannot search
// refunds by metadata, so this pages through the charge's refunds.
func (c *Client) FindByOperation(ctx context.Context, chargeID, operationID string) (*Refund, error) {
	return c.Find(ctx, &FindParams{ChargeID: chargeID, OperationID: operationID})
}

// FindParams are the parameters of Client.Find.
type FindParams struct {
	ChargeID string
	// OperationID finds the refund whose metadata names the operation.
	OperationID string
	// DownstreamKey, when set, also finds a refund whose metadata names
	// the same downstream key (the same intent and generation) made by
	// another operation, created at CreatedAfter or later: the refund of
	// an operation whose claim a lost commit forgot.
	DownstreamKey string
	CreatedAfter  time.Time
}

// Find lists the charge's refunds and returns the one whose metadata names
// p.OperationID, else one of the same downstream key (see FindParams), or
// vocab.ErrNotFound. Stripe cannot search refunds by metadata, so this
// pages through the charge's refunds.
func (c *Client) Find(ctx context.Context, p *FindParams) (*Refund, error) {
	params := &stripe.RefundListParams{Charge: stripe.String(p.ChargeID)}
	params.Context = ctx
	params.Limit = stripe.Int64(100)
	it := c.refunds.List(params)
	var sameIntent *Refund
	for it.Next() {
		re := it.Refund()
		switch {
		case re.Metadata[MetadataOperationID] == p.OperationID:
			return view(re), nil
		case sameIntent == nil && p.DownstreamKey != "" && re.Metadata[MetadataDownstreamKey] == p.DownstreamKey &&
			!time.Unix(re.Created, 0).Before(p.CreatedAfter.Truncate(time.Second)):
			sameIntent = view(re)
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	if sameIntent != nil {
		return sameIntent, nil
	}
	return nil, vocab.ErrNotFound
}

func view(re *stripe.Refund) *Refund {
	out := &Refund{
		ID:          re.ID,
		AmountCents: re.Amount,
		Currency:    string(re.Currency),
		Status:      string(re.Status),
		OperationID: re.Metadata[MetadataOperationID],

		DownstreamKey: re.Metadata[MetadataDownstreamKey],
		Created:       time.Unix(re.Created, 0),
	}
	if re.Charge != nil {
		out.ChargeID = re.Charge.ID
	}
	if resp := re.LastResponse; resp != nil && resp.Header.Get("Idempotent-Replayed") == "true" {
		out.Replayed = true
	}
	return out
}

// Classify maps a Stripe error to our code and says whether it is
// definitive (the claim fails) or transient (River retries, same key).
func Classify(err error) (vocab.ErrorInfo, bool) {
	var se *stripe.Error
	if !errors.As(err, &se) {
		// Network errors, timeouts, dropped responses: the refund may or may
		// not exist; retrying with the same key is safe and finds out.
		return vocab.ErrorInfo{Code: "downstream_unavailable", Message: "Stripe did not answer: " + err.Error()}, false
	}
	msg := fmt.Sprintf("Stripe %d %s", se.HTTPStatusCode, se.Type)
	if se.Code != "" {
		msg += " (" + string(se.Code) + ")"
	}
	if se.Msg != "" {
		msg += ": " + truncate(se.Msg, 300)
	}
	switch {
	case se.Type == stripe.ErrorTypeIdempotency && se.HTTPStatusCode == http.StatusConflict:
		// A concurrent request with the same key is still in progress.
		return vocab.ErrorInfo{Code: "downstream_in_progress", Message: msg}, false
	case se.Type == stripe.ErrorTypeIdempotency:
		return vocab.ErrorInfo{Code: vocab.CodeDownstreamIdempotencyMismatch, Message: msg}, true
	case se.HTTPStatusCode == http.StatusConflict || se.Code == "idempotency_key_in_use":
		return vocab.ErrorInfo{Code: "downstream_in_progress", Message: msg}, false
	case se.HTTPStatusCode == http.StatusTooManyRequests || se.Code == stripe.ErrorCodeRateLimit:
		return vocab.ErrorInfo{Code: "downstream_rate_limited", Message: msg}, false
	case se.HTTPStatusCode >= 500 || se.Type == stripe.ErrorTypeAPI:
		return vocab.ErrorInfo{Code: "downstream_error", Message: msg}, false
	case se.Type == stripe.ErrorTypeCard:
		return vocab.ErrorInfo{Code: vocab.CodeCardDeclined, Message: msg}, true
	case se.Code == stripe.ErrorCodeChargeAlreadyRefunded || se.Code == "amount_too_large":
		return vocab.ErrorInfo{Code: vocab.CodeAmountExceedsRefundable, Message: msg}, true
	case se.HTTPStatusCode == http.StatusUnauthorized || se.HTTPStatusCode == http.StatusForbidden:
		// Our key is wrong: no retry will help until an operator fixes it.
		return vocab.ErrorInfo{Code: "downstream_auth", Message: msg}, true
	case se.Type == stripe.ErrorTypeInvalidRequest || se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusNotFound:
		return vocab.ErrorInfo{Code: vocab.CodeDownstreamRejected, Message: msg}, true
	}
	return vocab.ErrorInfo{Code: "downstream_error", Message: msg}, false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
