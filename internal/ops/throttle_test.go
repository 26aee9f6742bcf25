package ops

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// The red-team's attack: 30 wrong passwords, then the right one, all
// answered at once. Now failures past ThrottleFree lock the address out with
// a doubling backoff; while locked out even the right password gets 429
// unchecked; another address is not affected; after the backoff the right
// password works and the address is forgotten.
func TestBasicLoginsAreThrottledPerAddress(t *testing.T) {
	t.Parallel()
	basic, err := NewBasicCredentials("oncall", testPassword)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	th := NewThrottle(reg)
	var (
		mu  sync.Mutex
		now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	)
	th.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	a := &Auth{Bearer: func(h http.Handler) http.Handler { return h }, Basic: basic, Throttle: th}
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	try := func(addr, password string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/ops/riverui/", nil)
		r.RemoteAddr = addr + ":40000"
		r.SetBasicAuth("oncall", password)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	codes := map[int]int{}
	for range 30 {
		codes[try("198.51.100.7", "wrong-password-1").Code]++
	}
	require.Equal(t, map[int]int{http.StatusUnauthorized: ThrottleFree + 1, http.StatusTooManyRequests: 30 - ThrottleFree - 1}, codes,
		"the sixth failure starts the lockout; the rest are refused unchecked")
	locked := try("198.51.100.7", testPassword)
	require.Equal(t, http.StatusTooManyRequests, locked.Code, "the right password waits out the lockout too")
	require.Equal(t, "1", locked.Header().Get("Retry-After"))
	require.Equal(t, http.StatusOK, try("203.0.113.9", testPassword).Code, "another address is not affected")

	advance(ThrottleBase)
	require.Equal(t, http.StatusUnauthorized, try("198.51.100.7", "wrong-password-2").Code)
	require.Equal(t, "2", try("198.51.100.7", testPassword).Header().Get("Retry-After"), "the backoff doubles")
	advance(2 * ThrottleBase)
	require.Equal(t, http.StatusOK, try("198.51.100.7", testPassword).Code)
	require.Equal(t, http.StatusUnauthorized, try("198.51.100.7", "wrong-password-3").Code, "a success forgets the address")

	require.Equal(t, 8.0, testutil.ToFloat64(th.failures))
	require.Equal(t, 26.0, testutil.ToFloat64(th.throttled))
}
