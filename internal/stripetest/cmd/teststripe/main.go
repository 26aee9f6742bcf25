// Command teststripe runs the test Stripe of package stripetest as a
// standalone process, for chaos scripts: it prints its base URL (for
// STRIPE_API_BASE) alone on the first line of stdout, logs to stderr, and
// serves Stripe's refund endpoints plus the control endpoints under /_
// (GET /_stats, POST /_charges, POST /_clear_charge_error, POST /_hold, GET /_held, POST /_release,
// POST /_drop, POST /_fail, POST /_expire_keys, POST /_pend,
// POST /_dashboard_refund, POST /_fail_refund, POST /_succeed_refund,
// POST /_webhooks, GET /_webhooks, GET /_webhook_events, POST /_webhooks/flush,
// POST /_webhooks/resend) until SIGINT or SIGTERM.
//
//	teststripe -addr 127.0.0.1:12111 -drop-rate 0.2 -error-rate 0.1 -seed 42 \
//	    -charge ch_123:5000:usd -auto-charge-amount 100000
//
// With -webhook-url and a signing secret it sends signed Stripe webhooks
// there (see package stripetest), with their own faults:
//
//	TESTSTRIPE_WEBHOOK_SECRET=whsec_dev teststripe -seed 42 \
//	    -webhook-url http://127.0.0.1:8080/stripe/webhook -webhook-refund-events \
//	    -webhook-duplicate-rate 0.1 -webhook-reorder-rate 0.1 -webhook-drop-rate 0.05
//
// Every -webhook-* flag not given defaults to the environment variable
// TESTSTRIPE_WEBHOOK_* of the same name (-webhook-drop-rate:
// TESTSTRIPE_WEBHOOK_DROP_RATE); prefer the environment for the secrets.
// Webhooks can also be turned on later with POST /_webhooks, when the
// endpoint's address is known only after this process started. On shutdown
// the queued deliveries are made first (retries without backoff).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/internal/stripetest"
)

type chargeFlags []string

func (c *chargeFlags) String() string     { return strings.Join(*c, ",") }
func (c *chargeFlags) Set(v string) error { *c = append(*c, v); return nil }

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("teststripe: ")
	if err := run(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run() error {
	var (
		addr       = flag.String("addr", "127.0.0.1:0", "listen address (port 0 picks a free port)")
		dropRate   = flag.Float64("drop-rate", 0, "probability in [0,1] that a refund create's response is lost after it was applied")
		errorRate  = flag.Float64("error-rate", 0, "probability in [0,1] that a refund create answers 500 before applying anything")
		seed       = flag.Int64("seed", 0, "seed of the fault-injection random source (0: random, reported in /_stats)")
		delay      = flag.Duration("delay", 0, "delay before handling each refund create")
		apiKey     = flag.String("api-key", "", "the only secret key accepted (default: any sk_... key)")
		autoCharge = flag.Int64("auto-charge-amount", 0, "when > 0, unknown ch_... charges exist with this amount (cents, usd)")
		charges    chargeFlags
	)
	flag.Var(&charges, "charge", "a charge, id:amount_cents[:currency] (repeatable)")
	var (
		whURL      = flag.String("webhook-url", "", "send signed Stripe webhooks to this URL (off when empty)")
		whSecret   = flag.String("webhook-secret", "", "the endpoint's signing secret, whsec_... (required with -webhook-url)")
		whPrevious = flag.String("webhook-previous-secret", "", "also sign with this secret (a second v1 signature, as while a rolled secret is still valid)")
		whRefund   = flag.Bool("webhook-refund-events", false, "also send refund.created, refund.updated and refund.failed (Stripe API 2024-10-28 and later); default: charge.refunded and charge.refund.updated only")
		whDelay    = flag.Duration("webhook-delay", 0, "delay before the first attempt of each delivery")
		whDup      = flag.Float64("webhook-duplicate-rate", 0, "probability in [0,1] that an event is delivered twice")
		whReorder  = flag.Float64("webhook-reorder-rate", 0, "probability in [0,1] that an event is held back and delivered after the next one")
		whDrop     = flag.Float64("webhook-drop-rate", 0, "probability in [0,1] that an event is never delivered (listed in GET /_webhooks)")
		whSync     = flag.Bool("webhook-sync", false, "deliver an action's events before it returns (a refund create: before its response)")
		whAttempts = flag.Int("webhook-max-attempts", stripetest.DefaultWebhookMaxAttempts, "attempts per delivery; non-2xx or unreachable is retried")
		whBackoff  = flag.Duration("webhook-backoff", stripetest.DefaultWebhookBackoff, "wait before the first retry, doubled for each next one (negative: none)")
	)
	flag.Usage = func() {
		out := flag.CommandLine.Output()
		fmt.Fprintf(out, "Usage: teststripe [flags]\n\n"+
			"Serves a counting test Stripe (refunds, with fault injection) and prints its base URL on stdout.\n"+
			"Each -webhook-* flag not given defaults to $TESTSTRIPE_WEBHOOK_<NAME> (e.g. -webhook-secret:\n"+
			"$TESTSTRIPE_WEBHOOK_SECRET, -webhook-drop-rate: $TESTSTRIPE_WEBHOOK_DROP_RATE); prefer it for secrets.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := webhookFlagsFromEnv(); err != nil {
		return err
	}

	if *dropRate < 0 || *dropRate > 1 {
		return fmt.Errorf("-drop-rate must be within [0,1], got %v", *dropRate)
	}
	if *errorRate < 0 || *errorRate > 1 {
		return fmt.Errorf("-error-rate must be within [0,1], got %v", *errorRate)
	}
	s := stripetest.New(&stripetest.Options{
		Seed:             *seed,
		DropRate:         *dropRate,
		ErrorRate:        *errorRate,
		Delay:            *delay,
		APIKey:           *apiKey,
		AutoChargeAmount: *autoCharge,
	})
	for _, c := range charges {
		parts := strings.Split(c, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return fmt.Errorf("-charge %q: want id:amount_cents[:currency]", c)
		}
		amount, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || amount < 0 {
			return fmt.Errorf("-charge %q: amount must be a non-negative integer", c)
		}
		currency := "usd"
		if len(parts) == 3 {
			currency = parts[2]
		}
		s.AddCharge(parts[0], amount, currency)
	}

	if *whURL != "" {
		err := s.EnableWebhooks(stripetest.WebhookOptions{
			URL: *whURL, Secret: *whSecret, PreviousSecret: *whPrevious, RefundEvents: *whRefund,
			Delay: *whDelay, DuplicateRate: *whDup, ReorderRate: *whReorder, DropRate: *whDrop,
			Synchronous: *whSync, MaxAttempts: *whAttempts, Backoff: *whBackoff,
		})
		if err != nil {
			return err
		}
	} else if *whSecret != "" || *whPrevious != "" {
		return errors.New("-webhook-secret without -webhook-url")
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("-addr %s: %w", *addr, err)
	}
	tcp := ln.Addr().(*net.TCPAddr)
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	fmt.Printf("http://%s\n", net.JoinHostPort(host, strconv.Itoa(tcp.Port)))
	log.Printf("listening on %s (seed %d, drop-rate %v, error-rate %v)", ln.Addr(), s.Stats().Seed, *dropRate, *errorRate)
	if *whURL != "" {
		log.Printf("webhooks to %s (refund events %v, duplicate-rate %v, reorder-rate %v, drop-rate %v, sync %v)",
			*whURL, *whRefund, *whDup, *whReorder, *whDrop, *whSync)
	}

	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-errc:
		return err
	case got := <-sig:
		log.Printf("%v: shutting down; stats: %s", got, s.Stats())
	}
	s.Close() // releases holds so that Shutdown does not wait on them
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// webhookFlagsFromEnv sets each -webhook-* flag not given on the command line
// from TESTSTRIPE_WEBHOOK_<NAME>, parsed as the flag would be.
func webhookFlagsFromEnv() error {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	flag.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || !strings.HasPrefix(f.Name, "webhook-") {
			return
		}
		env := "TESTSTRIPE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && v != "" {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("$%s: %w", env, e)
			}
		}
	})
	return err
}
