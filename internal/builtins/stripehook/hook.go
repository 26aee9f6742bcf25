// Package stripehook is the provider's side of the built-in refund_order:
// Stripe's signed webhooks at POST /v1/webhooks/stripe (a route the
// built-ins contribute to the api, outside tenant authentication), the
// periodic list of Stripe's refunds (Poller, a River job of the worker's),
// the ingest both feed, and the reconciliation operators read
// (ListDrift, ReconcileOrder). Each event
// is applied once, by its id; a refund's later status is never overwritten
// by an earlier event; an operation whose outcome was unknown is settled
// by what Stripe reports (core.Settle), without calling Stripe again; and
// a refund no operation explains becomes a drift record.
package stripehook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Path is the webhook endpoint's route.
const Path = "/v1/webhooks/stripe"

// DefaultTolerance is how old a signature's timestamp may be (Stripe's
// own default): an older delivery is refused as a possible replay.
const DefaultTolerance = webhook.DefaultTolerance

// Config configures the webhook route.
type Config struct {
	// Secrets are the endpoint's signing secrets (whsec_…); an event
	// signed with any of them is accepted (several while one is rolled).
	// Required.
	Secrets []string
	// Tolerance bounds the signature's age; default DefaultTolerance.
	Tolerance time.Duration
	// Ingest applies the events. Required.
	Ingest *Ingester
}

// Routes returns the webhook route on cfg (api.Config.Routes).
func Routes(cfg *Config) api.Routes {
	return func(r chi.Router, kit *api.RouteKit) error {
		if len(cfg.Secrets) == 0 || cfg.Ingest == nil {
			return errors.New("stripehook: Config.Secrets and Config.Ingest are required")
		}
		if cfg.Ingest.logger == nil {
			cfg.Ingest.logger = kit.Logger()
		}
		if err := cfg.Ingest.register(kit.Registerer()); err != nil {
			return err
		}
		tolerance := cfg.Tolerance
		if tolerance == 0 {
			tolerance = DefaultTolerance
		}
		h := &handler{secrets: cfg.Secrets, tolerance: tolerance, ingest: cfg.Ingest, kit: kit}
		r.Post(Path, h.ServeHTTP)
		return nil
	}
}

// handler serves POST /v1/webhooks/stripe.
type handler struct {
	secrets   []string
	tolerance time.Duration
	ingest    *Ingester
	kit       *api.RouteKit
}

// Answer is the webhook's 200 body: what became of the event.
type Answer struct {
	Received bool    `json:"received"`
	EventID  string  `json:"event_id"`
	Outcome  Outcome `json:"outcome"`
}

// ServeHTTP verifies the Stripe-Signature header against each secret,
// then applies the event once. A bad signature, a stale timestamp or a
// body that is no event answers 400 and changes nothing; a database
// failure answers 503, so that Stripe delivers the event again.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	payload, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.kit.Problem(w, r, http.StatusRequestEntityTooLarge,
				vocab.Errorf(vocab.CodeInvalidArgument, "body", "request body is larger than %d bytes", tooLarge.Limit), 0)
			return
		}
		h.kit.Problem(w, r, http.StatusBadRequest, vocab.Errorf(vocab.CodeInvalidArgument, "body", "reading the body: %v", err), 0)
		return
	}
	ev, err := h.verify(payload, r.Header.Get("Stripe-Signature"))
	if err != nil {
		h.ingest.rejected.Inc()
		h.kit.Logger().WarnContext(r.Context(), "stripe webhook refused", "request_id", h.kit.RequestID(r), "error", err)
		h.kit.Problem(w, r, http.StatusBadRequest, vocab.Errorf(vocab.CodeInvalidArgument, "Stripe-Signature", "%v", err), 0)
		return
	}
	event, err := FromStripe(&ev)
	if err != nil {
		h.kit.Problem(w, r, http.StatusBadRequest, vocab.Errorf(vocab.CodeInvalidArgument, "body", "%v", err), 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.kit.DBTimeout())
	defer cancel()
	outcome, err := h.ingest.Ingest(ctx, event, SourceWebhook)
	if err != nil {
		h.kit.Logger().ErrorContext(r.Context(), "stripe webhook not applied", "request_id", h.kit.RequestID(r),
			"event_id", event.ID, "type", event.Type, "error", err)
		h.kit.Problem(w, r, http.StatusServiceUnavailable,
			vocab.Errorf(vocab.CodeUnavailable, "", "the event was not applied; Stripe delivers it again"), time.Second)
		return
	}
	h.kit.Logger().InfoContext(r.Context(), "stripe webhook", "request_id", h.kit.RequestID(r),
		"event_id", event.ID, "type", event.Type, "outcome", outcome)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(&Answer{Received: true, EventID: event.ID, Outcome: outcome})
}

// verify checks payload's signature against each secret with stripe-go's
// webhook package: the first that verifies it wins. A stale timestamp, a
// missing or malformed header is refused whatever the secret.
func (h *handler) verify(payload []byte, header string) (stripe.Event, error) {
	opts := webhook.ConstructEventOptions{Tolerance: h.tolerance, IgnoreAPIVersionMismatch: true}
	for _, secret := range h.secrets {
		ev, err := webhook.ConstructEventWithOptions(payload, header, secret, opts)
		switch {
		case err == nil:
			return ev, nil
		case errors.Is(err, webhook.ErrNoValidSignature):
			continue
		case errors.Is(err, webhook.ErrNotSigned):
			return ev, errors.New("no Stripe-Signature header: only events Stripe signed are accepted")
		case errors.Is(err, webhook.ErrInvalidHeader):
			return ev, errors.New("the Stripe-Signature header is malformed")
		case errors.Is(err, webhook.ErrTooOld):
			return ev, fmt.Errorf("the signature's timestamp is older than %s: a stale or replayed delivery", h.tolerance)
		default:
			return ev, fmt.Errorf("the body is not a Stripe event: %v", err)
		}
	}
	return stripe.Event{}, errors.New("no valid signature for this endpoint's secrets (check IDEMGATE_STRIPE_WEBHOOK_SECRETS against the endpoint's signing secret at Stripe)")
}
