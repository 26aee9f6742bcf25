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

// Behind a TLS proxy every operator shares one address, so an attacker's
// wrong passwords lock that address out. The operator's browser, where a
// Basic login succeeded before, carries a device cookie: it is throttled on
// its own and the right password gets in; a request without the cookie,
// with a forged one, or with another user's waits out the address's
// lockout as before; a device's own failures lock out that device only.
func TestDeviceCookieKeepsTheOperatorIn(t *testing.T) {
	t.Parallel()
	basic, err := NewBasicCredentials("oncall", testPassword)
	require.NoError(t, err)
	th := NewThrottle(nil)
	var (
		mu  sync.Mutex
		now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	)
	th.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	devices := NewDevices("a-deployment-secret-of-at-least-32-bytes")
	devices.now = th.now
	a := &Auth{Bearer: func(h http.Handler) http.Handler { return h }, Basic: basic, Throttle: th, Devices: devices}
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	const proxy = "10.0.0.1"
	try := func(password string, cookie *http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/ops/riverui/", nil)
		r.RemoteAddr = proxy + ":40000"
		r.SetBasicAuth("oncall", password)
		if cookie != nil {
			r.AddCookie(cookie)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	// The operator logged in earlier from their browser: a device cookie.
	first := try(testPassword, nil)
	require.Equal(t, http.StatusOK, first.Code)
	cookies := first.Result().Cookies()
	require.Len(t, cookies, 1)
	device := cookies[0]
	require.Equal(t, DeviceCookie, device.Name)
	require.True(t, device.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, device.SameSite)

	// The attack through the same proxy locks the address out.
	for range 20 {
		try("wrong-password-1", nil)
	}
	require.Equal(t, http.StatusTooManyRequests, try(testPassword, nil).Code, "without the cookie: the address's lockout")
	forged := *device
	forged.Value = device.Value[:len(device.Value)-2] + "xx"
	require.Equal(t, http.StatusTooManyRequests, try(testPassword, &forged).Code, "a forged cookie is no device")
	other := NewDevices("another-deployment-secret-of-32-bytes!").issue("oncall", false)
	require.Equal(t, http.StatusTooManyRequests, try(testPassword, other).Code, "another deployment's cookie is no device")

	// The operator's browser gets in, and is not issued a new cookie.
	in := try(testPassword, device)
	require.Equal(t, http.StatusOK, in.Code, "the operator's device is not locked out by the address")
	require.Empty(t, in.Result().Cookies())

	// A device's own failures lock out that device only.
	for range ThrottleFree + 1 {
		require.Equal(t, http.StatusUnauthorized, try("wrong-password-2", device).Code)
	}
	require.Equal(t, http.StatusTooManyRequests, try(testPassword, device).Code)

	// An expired cookie is no device.
	mu.Lock()
	now = now.Add(deviceCookieTTL + time.Hour)
	mu.Unlock()
	_, ok := devices.device(func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/ops/", nil)
		r.AddCookie(device)
		return r
	}(), "oncall")
	require.False(t, ok)
}
