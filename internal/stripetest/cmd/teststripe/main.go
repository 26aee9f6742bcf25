// Command teststripe runs the test Stripe of package stripetest as a
// standalone process, for chaos scripts: it prints its base URL (for
// STRIPE_API_BASE) alone on the first line of stdout, logs to stderr, and
// serves Stripe's refund endpoints plus the control endpoints under /_
// (GET /_stats, POST /_charges, POST /_clear_charge_error, POST /_hold, GET /_held, POST /_release,
// POST /_drop, POST /_fail, POST /_expire_keys) until SIGINT or SIGTERM.
//
//	teststripe -addr 127.0.0.1:12111 -drop-rate 0.2 -error-rate 0.1 -seed 42 \
//	    -charge ch_123:5000:usd -auto-charge-amount 100000
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
	flag.Parse()

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
