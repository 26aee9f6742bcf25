package oauth_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/oauth"
	"github.com/idemgate/idemgate/internal/oauth/oauthtest"
)

// countingTransport counts the requests for the issuer's keys.
type countingTransport struct{ keys atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, "keys") || strings.Contains(r.URL.Path, "jwks") {
		c.keys.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A storm of tokens naming keys the issuer never had (forged, each with a
// new kid) fetches the issuer's keys at most once per MinRefetchInterval,
// however many arrive at once; each is refused as a bad signature; a
// genuine token still passes; once the interval has passed (the injected
// clock) a rotated key is fetched again.
func TestUnknownKeyIDsDoNotStormTheIssuer(t *testing.T) {
	t.Parallel()
	op := oauthtest.Start(t, nil)
	counter := &countingTransport{}
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	cfg := oauth.Config{Issuer: op.Issuer(), Audience: oauthtest.DefaultAudience, TenantClaim: "tenant",
		HTTPClient: &http.Client{Transport: counter, Timeout: 10 * time.Second},
		Now:        func() time.Time { return time.Unix(0, now.Load()) }}
	v := newVerifier(t, cfg)
	genuine := op.Token(t, &oauthtest.TokenParams{Tenant: "acme"})
	_, err := v.Authenticate(t.Context(), genuine)
	require.NoError(t, err)
	require.EqualValues(t, 1, counter.keys.Load(), "the first token fetches the keys")

	storm := func(n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				forged := withHeader(t, genuine, `{"alg":"RS256","typ":"JWT","kid":"forged-`+strconv.Itoa(i)+`"}`)
				_, err := v.Authenticate(t.Context(), forged)
				requireRefused(t, err, oauth.ReasonSignature, forged)
			}()
		}
		wg.Wait()
	}
	storm(400)
	require.EqualValues(t, 2, counter.keys.Load(), "400 unknown kids at once: one refetch")
	storm(400)
	require.EqualValues(t, 2, counter.keys.Load(), "within the interval: none")
	_, err = v.Authenticate(t.Context(), genuine)
	require.NoError(t, err, "a genuine token passes with the held keys")

	// A rotation while the interval runs waits for its end.
	op.RotateKey(t)
	rotated := op.Token(t, &oauthtest.TokenParams{Tenant: "acme"})
	_, err = v.Authenticate(t.Context(), rotated)
	requireRefused(t, err, oauth.ReasonSignature, rotated)
	now.Add(int64(oauth.MinRefetchInterval))
	_, err = v.Authenticate(t.Context(), rotated)
	require.NoError(t, err, "after the interval the rotated key is fetched")
	require.EqualValues(t, 3, counter.keys.Load())
}
