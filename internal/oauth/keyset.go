package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// MinRefetchInterval is the least time between two fetches of the issuer's
// JWKS that a token's unknown key (or a signature no held key verifies)
// may cause: tokens with made-up key ids cannot make idemgate hammer the
// issuer. A rotated key is picked up at the first token that names it, or,
// while such tokens arrive, within the interval.
const MinRefetchInterval = 10 * time.Second

// errNoKey is a signature that no key of the issuer's set verifies: a
// refusal, not an outage (it wraps nothing, as classify expects).
var errNoKey = errors.New("oauth: the signature does not verify with the issuer's keys")

// fetchError is a failed JWKS fetch: it wraps its cause (classify reads
// that as the issuer unreachable).
type fetchError struct{ err error }

func (e *fetchError) Error() string { return "oauth: fetching keys: " + e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// remoteKeys is the issuer's JWKS, fetched on first use and again when a
// token's signature verifies with no held key, at most once per
// MinRefetchInterval; concurrent callers share one fetch.
type remoteKeys struct {
	url    string
	client *http.Client
	now    func() time.Time
	algs   []jose.SignatureAlgorithm

	fetchMu sync.Mutex // one fetch at a time
	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time // when keys were last fetched; zero: never
	// refetched is when a token last caused a fetch after the first one:
	// the next such fetch waits MinRefetchInterval from it.
	refetched time.Time
	fetches   int // fetches made, for tests
}

func newRemoteKeys(url string, client *http.Client, now func() time.Time) *remoteKeys {
	algs := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, a := range signingAlgs {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	return &remoteKeys{url: url, client: client, now: now, algs: algs}
}

// VerifySignature implements oidc.KeySet.
func (k *remoteKeys) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, k.algs)
	if err != nil {
		return nil, fmt.Errorf("oauth: malformed token: %v", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errNoKey
	}
	kid := jws.Signatures[0].Header.KeyID
	keys, fetched := k.held()
	if payload, ok := verifyWith(jws, keys, kid); ok {
		return payload, nil
	}
	keys, err = k.refetch(ctx, fetched)
	if err != nil {
		return nil, err
	}
	if payload, ok := verifyWith(jws, keys, kid); ok {
		return payload, nil
	}
	return nil, errNoKey
}

func (k *remoteKeys) held() ([]jose.JSONWebKey, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys, k.fetched
}

// refetch fetches the set (again) unless another call fetched it since
// seen (then its keys are the answer) or the last refetch is less than
// MinRefetchInterval old (then the held keys are). The first fetch, and
// the first refetch after it (a rotation soon after start), wait for
// nothing.
func (k *remoteKeys) refetch(ctx context.Context, seen time.Time) ([]jose.JSONWebKey, error) {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	keys, fetched := k.held()
	if !fetched.Equal(seen) {
		return keys, nil
	}
	again := !fetched.IsZero()
	if again && !k.refetched.IsZero() && k.now().Sub(k.refetched) < MinRefetchInterval {
		return keys, nil
	}
	set, err := k.fetch(ctx)
	if err != nil {
		return nil, &fetchError{err: err}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys, k.fetched = set.Keys, k.now()
	if again {
		k.refetched = k.fetched
	}
	k.fetches++
	return k.keys, nil
}

func (k *remoteKeys) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", k.url, resp.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("GET %s: %w", k.url, err)
	}
	return &set, nil
}

// verifyWith verifies jws with the keys of id kid (all keys when the token
// names none).
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) ([]byte, bool) {
	for _, key := range keys {
		if kid != "" && key.KeyID != kid {
			continue
		}
		if key.Use != "" && key.Use != "sig" {
			continue
		}
		if payload, err := jws.Verify(key); err == nil {
			return payload, true
		}
	}
	return nil, false
}
