package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The api replicas' window: a replica that committed a claim and is killed
// before its client read the answer. A kill at a random moment rarely lands
// there, so each replica is reached through an APIProxy, a reverse proxy in
// the driver that, when a Holder is armed, keeps back the next answer
// "accepted" (the claim and its job are committed: the api wrote its answer
// after the commit), tells the driver, which kills that replica with
// SIGKILL, and then cuts the client's connection without an answer. The
// client retries the same key on another replica, as an agent behind a
// load balancer does, and must get a replay or the in-flight handle, never
// a second "accepted".

// Holder arms the proxies to hold one accepted answer at a time.
type Holder struct {
	mu    sync.Mutex
	armed bool
	held  chan *HeldAnswer // buffered 1
}

// NewHolder returns a disarmed Holder.
func NewHolder() *Holder { return &Holder{held: make(chan *HeldAnswer, 1)} }

// HeldAnswer is an accepted answer a proxy keeps back.
type HeldAnswer struct {
	// Replica is the index of the api replica that answered.
	Replica     int
	Tool, Key   string
	OperationID string
	At          time.Time
	drop        chan struct{}
	once        sync.Once
}

// Drop cuts the client's connection without the answer.
func (h *HeldAnswer) Drop() { h.once.Do(func() { close(h.drop) }) }

// Hold arms the proxies and waits up to timeout for one of them to hold an
// accepted answer; it returns nil when none came. The caller must Drop
// the answer it gets.
func (h *Holder) Hold(ctx context.Context, timeout time.Duration) *HeldAnswer {
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-h.held:
		return a
	case <-t.C:
	case <-ctx.Done():
	}
	h.mu.Lock()
	h.armed = false
	h.mu.Unlock()
	select { // held between the timeout and disarming
	case a := <-h.held:
		a.Drop()
	default:
	}
	return nil
}

// take disarms the Holder and hands a over, reporting whether it was armed.
func (h *Holder) take(a *HeldAnswer) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.armed {
		return false
	}
	h.armed = false
	select {
	case h.held <- a:
		return true
	default:
		return false
	}
}

var discardLog = log.New(io.Discard, "", 0)

// ProxyStats counts what an APIProxy did to its clients' requests.
type ProxyStats struct {
	// Refused: the replica was down (connection refused): nothing reached
	// it, and the client's connection was cut.
	Refused int64
	// Cut: the replica took the request and died before answering (a
	// random kill mid-request): an answer lost, the claim committed or not.
	Cut int64
	// Held: accepted answers held and dropped (the targeted kills).
	Held int64
}

// APIProxy is a reverse proxy in front of one api replica.
type APIProxy struct {
	replica  int
	upstream string // host:port of the replica
	holder   *Holder
	ln       net.Listener
	srv      *http.Server
	tr       *http.Transport
	refused  atomic.Int64
	cut      atomic.Int64
	held     atomic.Int64
}

// StartAPIProxy listens on a free loopback port and forwards to the api
// replica at upstream (host:port).
func StartAPIProxy(replica int, upstream string, holder *Holder) (*APIProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.DialContext = (&net.Dialer{Timeout: 2 * time.Second}).DialContext
	p := &APIProxy{replica: replica, upstream: upstream, holder: holder, ln: ln, tr: tr}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ErrorLog: discardLog}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL, which clients call.
func (p *APIProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Stats returns the proxy's counts so far.
func (p *APIProxy) Stats() ProxyStats {
	return ProxyStats{Refused: p.refused.Load(), Cut: p.cut.Load(), Held: p.held.Load()}
}

// Close stops the proxy.
func (p *APIProxy) Close() error {
	p.tr.CloseIdleConnections()
	return p.srv.Close()
}

func (p *APIProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	out.Header = r.Header.Clone()
	// A load balancer does not resend a request the replica may have
	// acted on: without GetBody the transport does not either.
	out.GetBody = nil
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			p.refused.Add(1)
		} else {
			p.cut.Add(1)
		}
		panic(http.ErrAbortHandler) // the client's connection fails too
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if err != nil {
		p.cut.Add(1)
		panic(http.ErrAbortHandler)
	}
	if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/tools/") &&
		(resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusAccepted) {
		var a answer
		if json.Unmarshal(b, &a) == nil && a.Outcome == "accepted" && a.Operation != nil {
			h := &HeldAnswer{Replica: p.replica, Tool: strings.TrimPrefix(r.URL.Path, "/v1/tools/"),
				Key: r.Header.Get("Idempotency-Key"), OperationID: a.Operation.OperationID, At: time.Now(), drop: make(chan struct{})}
			if p.holder.take(h) {
				select {
				case <-h.drop:
				case <-time.After(time.Minute):
				}
				p.held.Add(1)
				panic(http.ErrAbortHandler) // the answer is lost with the replica
			}
		}
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
}
