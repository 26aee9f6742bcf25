package stripehook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/refund"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/vocab"
)

// SourcePoll: the periodic list of Stripe's refunds, which catches what a
// missed webhook would have said.
const SourcePoll Source = "poll"

// Defaults of the periodic list.
const (
	// DefaultPollInterval is how often the list runs.
	DefaultPollInterval = 10 * time.Minute
	// DefaultPollLookback is how far back each pass reads refunds again,
	// for the status changes of refunds it saw before.
	DefaultPollLookback = 72 * time.Hour
	// DefaultPollPageSize is the refunds asked for per page (Stripe's
	// most is 100).
	DefaultPollPageSize = 100
	// DefaultPollMaxPages bounds the pages one pass reads.
	DefaultPollMaxPages = 50
)

// pollCursor names the cursor row of the list in provider_cursors: the id
// of the newest refund a pass has read.
const pollCursor = "stripe_refunds"

// PollConfig configures a Poller.
type PollConfig struct {
	// APIKey is Stripe's secret key (STRIPE_API_KEY). Required.
	APIKey string
	// BaseURL is Stripe's API base (STRIPE_API_BASE); default Stripe's.
	BaseURL string
	// HTTPClient defaults to a client with a 30 s timeout.
	HTTPClient *http.Client
	// Lookback: default DefaultPollLookback. PageSize: default
	// DefaultPollPageSize. MaxPages: default DefaultPollMaxPages.
	Lookback time.Duration
	PageSize int
	MaxPages int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Ingest applies the refunds (the webhook endpoint's). Required.
	Ingest *Ingester
	Logger *slog.Logger
}

// Poller is the periodic list of Stripe's refunds: each refund read goes
// through the webhook's ingest as an event of its own, named by the refund
// and the status read (poll_<refund>_<status>), so a status already
// applied is a duplicate, and an earlier status is stale.
type Poller struct {
	cfg     PollConfig
	refunds refund.Client
}

// NewPoller returns a Poller, or an error naming the missing setting.
func NewPoller(cfg *PollConfig) (*Poller, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("STRIPE_API_KEY is required for the periodic list of Stripe's refunds")
	}
	if cfg.Ingest == nil {
		return nil, errors.New("stripehook: PollConfig.Ingest is required")
	}
	c := *cfg
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if c.Lookback <= 0 {
		c.Lookback = DefaultPollLookback
	}
	if c.PageSize <= 0 || c.PageSize > 100 {
		c.PageSize = DefaultPollPageSize
	}
	if c.MaxPages <= 0 {
		c.MaxPages = DefaultPollMaxPages
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	bc := &stripe.BackendConfig{HTTPClient: c.HTTPClient, MaxNetworkRetries: stripe.Int64(1),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}, EnableTelemetry: stripe.Bool(false)}
	if c.BaseURL != "" {
		bc.URL = stripe.String(c.BaseURL)
	}
	return &Poller{cfg: c, refunds: refund.Client{B: stripe.GetBackendWithConfig(stripe.APIBackend, bc), Key: c.APIKey}}, nil
}

// PollResult counts what a pass read and what became of it.
type PollResult struct {
	Read    int
	Applied int
	Pages   int
	// Cursor is the newest refund read, kept for the next pass.
	Cursor string
}

// page reads one page of refunds, newest first, after (older than) or
// before (newer than) a refund id.
func (p *Poller) page(ctx context.Context, startingAfter, endingBefore string) ([]*stripe.Refund, bool, error) {
	params := &stripe.RefundListParams{}
	params.Context = ctx
	params.Limit = stripe.Int64(int64(p.cfg.PageSize))
	params.Single = true
	if startingAfter != "" {
		params.StartingAfter = stripe.String(startingAfter)
	}
	if endingBefore != "" {
		params.EndingBefore = stripe.String(endingBefore)
	}
	it := p.refunds.List(params)
	list := it.RefundList()
	if err := it.Err(); err != nil {
		return nil, false, err
	}
	if list == nil {
		return nil, false, nil
	}
	return list.Data, list.HasMore, nil
}

// Pass lists Stripe's refunds and ingests each: first those created since
// the cursor (ending_before the cursor, page by page towards the newest,
// the cursor kept after each page), then the most recent ones again back
// to the lookback (starting_after, towards the oldest), for the status
// changes of refunds read before. At most MaxPages pages in all.
func (p *Poller) Pass(ctx context.Context) (*PollResult, error) {
	res := &PollResult{}
	cursor, err := p.cursor(ctx)
	if err != nil {
		return res, err
	}
	res.Cursor = cursor
	ingest := func(refunds []*stripe.Refund) error {
		now := p.cfg.Now().Unix()
		for _, re := range refunds {
			if re == nil || re.ID == "" {
				continue
			}
			r := RefundFromStripe(re, "")
			out, err := p.cfg.Ingest.Ingest(ctx, &Event{ID: "poll_" + r.ID + "_" + r.Status, Type: "refund.listed", Created: now,
				Refunds: []*Refund{r}}, SourcePoll)
			if err != nil {
				return err
			}
			res.Read++
			switch out {
			case OutcomeApplied:
				res.Applied++
			case OutcomeDuplicate:
				// Read before (a stale one with the known status was
				// followed up by Ingest): its operation may have become
				// unknown since, and is settled now.
				if err := p.cfg.Ingest.Reconsider(ctx, r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// Newer than the cursor, oldest page first.
	for cursor != "" && res.Pages < p.cfg.MaxPages {
		refunds, more, err := p.page(ctx, "", cursor)
		if err != nil {
			return res, fmt.Errorf("stripehook: list refunds ending before %s: %w", cursor, err)
		}
		res.Pages++
		if len(refunds) == 0 {
			break
		}
		if err := ingest(refunds); err != nil {
			return res, err
		}
		cursor = refunds[0].ID
		if err := p.saveCursor(ctx, cursor); err != nil {
			return res, err
		}
		res.Cursor = cursor
		if !more {
			break
		}
	}
	// The most recent, back to the lookback.
	oldest := p.cfg.Now().Add(-p.cfg.Lookback).Unix()
	after := ""
	for res.Pages < p.cfg.MaxPages {
		refunds, more, err := p.page(ctx, after, "")
		if err != nil {
			return res, fmt.Errorf("stripehook: list refunds: %w", err)
		}
		res.Pages++
		var recent []*stripe.Refund
		for _, re := range refunds {
			if re.Created >= oldest {
				recent = append(recent, re)
			}
		}
		if err := ingest(recent); err != nil {
			return res, err
		}
		if after == "" && len(refunds) > 0 && res.Cursor == "" {
			if err := p.saveCursor(ctx, refunds[0].ID); err != nil {
				return res, err
			}
			res.Cursor = refunds[0].ID
		}
		if !more || len(recent) < len(refunds) || len(refunds) == 0 {
			break
		}
		after = refunds[len(refunds)-1].ID
	}
	p.cfg.Logger.InfoContext(ctx, "stripe refunds listed", "read", res.Read, "applied", res.Applied, "pages", res.Pages, "cursor", res.Cursor)
	return res, nil
}

// cursor reads the list's cursor ("" before the first pass).
func (p *Poller) cursor(ctx context.Context) (string, error) {
	var value string
	err := readTx(ctx, p.cfg.Ingest.store, func(ctx context.Context, gtx gate.Tx) error {
		err := gtx.QueryRow(ctx, `SELECT value FROM provider_cursors WHERE name = $1`, pollCursor).Scan(&value)
		if errors.Is(err, vocab.ErrNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("stripehook: read the cursor of the refunds' list: %w", err)
	}
	return value, nil
}

// saveCursor keeps the list's cursor.
func (p *Poller) saveCursor(ctx context.Context, value string) error {
	err := readTx(ctx, p.cfg.Ingest.store, func(ctx context.Context, gtx gate.Tx) error {
		now := "now()"
		if gtx.Engine() == gate.SQLite {
			now = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
		}
		_, err := gtx.Exec(ctx, `INSERT INTO provider_cursors (name, value) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = `+now, pollCursor, value)
		return err
	})
	if err != nil {
		return fmt.Errorf("stripehook: keep the cursor of the refunds' list: %w", err)
	}
	return nil
}
