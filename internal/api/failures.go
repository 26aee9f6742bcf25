package api

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxFailureClients bounds a FailureLimiter's table: beyond it, idle
// addresses go first, then arbitrary ones.
const maxFailureClients = 10000

// FailureLimiter limits failed requests per client address, for a route
// that must not let a client guess (Config.Routes): each address has a
// token bucket of burst failures refilled at limit per second, and an
// address whose bucket is empty is refused until a failure's worth
// refills. Successes cost nothing. A nil *FailureLimiter limits nothing.
type FailureLimiter struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	clients map[string]*rate.Limiter
}

// NewFailureLimiter returns a limiter of burst failures refilled at
// perSecond, or nil (no limit) when perSecond is negative.
func NewFailureLimiter(perSecond float64, burst int) *FailureLimiter {
	if perSecond < 0 {
		return nil
	}
	return &FailureLimiter{limit: rate.Limit(perSecond), burst: burst, now: time.Now, clients: map[string]*rate.Limiter{}}
}

// Blocked reports whether client has no failure left, and how long until
// it has one.
func (l *FailureLimiter) Blocked(client string) (time.Duration, bool) {
	if l == nil {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.clients[client]
	if !ok {
		return 0, false
	}
	tokens := lim.TokensAt(l.now())
	if tokens >= 1 {
		return 0, false
	}
	if l.limit <= 0 {
		return time.Hour, true
	}
	wait := time.Duration((1 - tokens) / float64(l.limit) * float64(time.Second))
	return max(wait, time.Millisecond), true
}

// Failed spends one of client's failures.
func (l *FailureLimiter) Failed(client string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	lim, ok := l.clients[client]
	if !ok {
		l.evict(now)
		lim = rate.NewLimiter(l.limit, l.burst)
		l.clients[client] = lim
	}
	lim.AllowN(now, 1)
}

// evict makes room for one more client when the table is full: first the
// clients whose bucket is full again (idle), then any. The caller holds mu.
func (l *FailureLimiter) evict(now time.Time) {
	if len(l.clients) < maxFailureClients {
		return
	}
	for k, lim := range l.clients {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.clients, k)
		}
	}
	for k := range l.clients {
		if len(l.clients) < maxFailureClients {
			return
		}
		delete(l.clients, k)
	}
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
