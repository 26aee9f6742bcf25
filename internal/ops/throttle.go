package ops

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Throttle limits failed operator logins per client address: after
// ThrottleFree failures, each further one locks the address out for a
// backoff that doubles from ThrottleBase up to ThrottleMax; a success
// forgets the address. While locked out, every Basic attempt, the right
// password included, answers 429 without being checked.
type Throttle struct {
	now func() time.Time

	mu      sync.Mutex
	clients map[string]*attempts

	failures  prometheus.Counter
	throttled prometheus.Counter
}

type attempts struct {
	failures int
	until    time.Time // locked out until
	last     time.Time
}

// Throttle tuning.
const (
	// ThrottleFree is how many failures an address has before lockouts.
	ThrottleFree = 5
	// ThrottleBase is the first lockout; each further failure doubles it.
	ThrottleBase = time.Second
	// ThrottleMax bounds a lockout.
	ThrottleMax = 5 * time.Minute
	// throttleForget drops an address idle this long (bounded memory).
	throttleForget = time.Hour
	// throttleMaxClients bounds the table; beyond it idle entries go first.
	throttleMaxClients = 10000
)

// NewThrottle returns a Throttle whose counters idemgate_ops_auth_failures_total
// and idemgate_ops_auth_throttled_total register with reg (nil: none).
func NewThrottle(reg prometheus.Registerer) *Throttle {
	t := &Throttle{now: time.Now, clients: map[string]*attempts{},
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "idemgate_ops_auth_failures_total",
			Help: "Failed operator Basic logins."}),
		throttled: prometheus.NewCounter(prometheus.CounterOpts{Name: "idemgate_ops_auth_throttled_total",
			Help: "Operator Basic logins refused unchecked because their address is locked out."}),
	}
	if reg != nil {
		reg.MustRegister(t.failures, t.throttled)
	}
	return t
}

// clientAddr is the request's peer address without the port. Forwarded
// headers are not trusted: a client could name any address.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// blocked reports whether client is locked out, and for how long.
func (t *Throttle) blocked(client string) (time.Duration, bool) {
	if t == nil {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.clients[client]
	if !ok {
		return 0, false
	}
	if wait := a.until.Sub(t.now()); wait > 0 {
		t.throttled.Inc()
		return wait, true
	}
	return 0, false
}

// failed records a failure and starts a lockout past ThrottleFree.
func (t *Throttle) failed(client string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures.Inc()
	now := t.now()
	a, ok := t.clients[client]
	if !ok {
		t.evict(now)
		a = &attempts{}
		t.clients[client] = a
	}
	a.failures++
	a.last = now
	if over := a.failures - ThrottleFree; over > 0 {
		backoff := ThrottleBase << min(over-1, 20)
		a.until = now.Add(min(backoff, ThrottleMax))
	}
}

// succeeded forgets client.
func (t *Throttle) succeeded(client string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.clients, client)
}

// evict drops idle entries when the table is full; caller holds mu.
func (t *Throttle) evict(now time.Time) {
	if len(t.clients) < throttleMaxClients {
		return
	}
	for k, a := range t.clients {
		if now.Sub(a.last) > throttleForget || now.After(a.until) {
			delete(t.clients, k)
		}
	}
}
