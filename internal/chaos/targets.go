package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/stripetest"
)

// Targeted kills: random SIGKILLs rarely land while a worker is between a
// downstream effect and its commit, since that window lasts milliseconds.
// A targeted kill widens it on purpose: the test Stripe (POST /_hold) or
// the SMTP proxy below holds the answer of an effect that was applied (a
// refund created, a mail stored by Mailpit), the driver finds the worker
// process whose River client fetched that claim's job, and kills exactly
// that one. The reclaimed operation then repeats the call with the same
// downstream key: Stripe replays the refund, SMTP sends the mail again
// (with the same Message-ID), which is the SMTP window the report measures.

// StripeControl drives the test Stripe's hold endpoints.
type StripeControl struct {
	Base string
	HTTP *http.Client
}

// Hold arms a hold on the next refund create and waits up to timeout until
// one is applied; it returns that refund's idempotency key (the downstream
// key), or "" when none came. Call Release afterwards in every case.
func (s *StripeControl) Hold(ctx context.Context, timeout time.Duration) (string, error) {
	if _, err := s.call(ctx, http.MethodPost, "/_hold"); err != nil {
		return "", err
	}
	b, err := s.call(ctx, http.MethodGet, "/_held?timeout="+timeout.String())
	if errors.Is(err, errHeldTimeout) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var held struct {
		IdempotencyKey string `json:"idempotency_key"`
	}
	if err := json.Unmarshal(b, &held); err != nil {
		return "", err
	}
	return held.IdempotencyKey, nil
}

// Release releases (or disarms) every hold.
func (s *StripeControl) Release(ctx context.Context) error {
	_, err := s.call(ctx, http.MethodPost, "/_release")
	return err
}

var errHeldTimeout = errors.New("no held refund yet")

// EnableWebhooks makes the test Stripe send its signed webhooks as c says
// (POST /_webhooks).
func (s *StripeControl) EnableWebhooks(ctx context.Context, c *stripetest.WebhookConfig) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.send(ctx, http.MethodPost, "/_webhooks", b)
	return err
}

// FlushWebhooks waits until the test Stripe has delivered (or given up)
// every webhook queued so far (POST /_webhooks/flush).
func (s *StripeControl) FlushWebhooks(ctx context.Context) error {
	_, err := s.call(ctx, http.MethodPost, "/_webhooks/flush?timeout=2m")
	if errors.Is(err, errHeldTimeout) {
		return errors.New("test Stripe: webhooks still pending after 2m")
	}
	return err
}

func (s *StripeControl) call(ctx context.Context, method, path string) ([]byte, error) {
	return s.send(ctx, method, path, nil)
}

func (s *StripeControl) send(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(s.Base, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusGatewayTimeout:
		return nil, errHeldTimeout
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("test Stripe %s %s: %s: %s", method, path, resp.Status, truncate(string(b), 200))
	}
	return b, nil
}

// WorkerOf returns the River client id that last fetched the job of the
// claim with downstream key key.
func WorkerOf(ctx context.Context, pool *pgxpool.Pool, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var id string
	err := pool.QueryRow(ctx, `SELECT coalesce(j.attempted_by[array_upper(j.attempted_by, 1)], '')
		FROM idempotency_claims c JOIN river_job j ON j.id = c.job_id
		WHERE c.downstream_key = $1`, key).Scan(&id)
	return id, err
}

// SMTPProxy relays SMTP between the workers and Mailpit, byte for byte,
// except that when armed it withholds the server's 250 answer to the end of
// one message's DATA (the message is stored by then) until released or
// until the client goes away.
type SMTPProxy struct {
	upstream string
	ln       net.Listener

	mu    sync.Mutex
	armed bool
	held  chan heldMail // buffered 1
}

type heldMail struct {
	messageID string
	release   chan struct{}
}

// StartSMTPProxy listens on a free loopback port and relays to upstream.
func StartSMTPProxy(upstream string) (*SMTPProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &SMTPProxy{upstream: upstream, ln: ln, held: make(chan heldMail, 1)}
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port (the workers' SMTP_ADDR).
func (p *SMTPProxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting connections.
func (p *SMTPProxy) Close() error { return p.ln.Close() }

// Hold arms the proxy and waits up to timeout for a message to be held; it
// returns the message's Message-ID (without brackets) and a release
// function, or "" and a no-op when no message came.
func (p *SMTPProxy) Hold(ctx context.Context, timeout time.Duration) (string, func()) {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case h := <-p.held:
		var once sync.Once
		return h.messageID, func() { once.Do(func() { close(h.release) }) }
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.armed = false
	p.mu.Unlock()
	// A message may have been held between the timeout and disarming.
	select {
	case h := <-p.held:
		close(h.release)
	default:
	}
	return "", func() {}
}

func (p *SMTPProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *SMTPProxy) serve(c net.Conn) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	clientGone := make(chan struct{})
	// dot carries the Message-ID of a message whose final "." was sent
	// upstream: the next reply is the answer to that DATA.
	dot := make(chan string, 1)

	go func() { // client -> server
		defer close(clientGone)
		defer u.Close()
		br := bufio.NewReader(c)
		inData, inHeaders, msgID := false, false, ""
		for {
			line, err := br.ReadString('\n')
			if len(line) > 0 {
				switch {
				case !inData && strings.EqualFold(strings.TrimSpace(line), "DATA"):
					inData, inHeaders, msgID = true, true, ""
				case inData && line == ".\r\n":
					inData = false
					select {
					case dot <- msgID:
					default:
					}
				case inData && inHeaders && (line == "\r\n" || line == "\n"):
					inHeaders = false
				case inData && inHeaders && len(line) > 11 && strings.EqualFold(line[:11], "Message-ID:"):
					msgID = strings.Trim(strings.TrimSpace(line[11:]), "<>")
				}
				if _, werr := io.WriteString(u, line); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	br := bufio.NewReader(u) // server -> client, one whole reply at a time
	for {
		var reply strings.Builder
		for {
			line, err := br.ReadString('\n')
			reply.WriteString(line)
			if err != nil {
				_, _ = io.WriteString(c, reply.String())
				return
			}
			if len(line) < 4 || line[3] != '-' {
				break
			}
		}
		r := reply.String()
		select {
		case id := <-dot:
			if strings.HasPrefix(r, "250") {
				p.maybeHold(id, clientGone)
			}
		default:
		}
		if _, err := io.WriteString(c, r); err != nil {
			return
		}
	}
}

// maybeHold blocks while the proxy is armed for this message, until
// released or until the client is gone.
func (p *SMTPProxy) maybeHold(messageID string, clientGone <-chan struct{}) {
	p.mu.Lock()
	if !p.armed {
		p.mu.Unlock()
		return
	}
	p.armed = false
	h := heldMail{messageID: messageID, release: make(chan struct{})}
	p.mu.Unlock()
	select {
	case p.held <- h:
	default:
		return
	}
	select {
	case <-h.release:
	case <-clientGone:
	case <-time.After(time.Minute):
	}
}
