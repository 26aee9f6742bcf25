package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/domain"
)

// Keys are the team's own API keys: "lic_" + a base64url JSON payload
// (tenant, user, scopes, expiry) + "." + its HMAC-SHA256, sent as a bearer
// token. idemgate calls Authenticate for every request to every route.
type Keys struct {
	secret []byte
	now    func() time.Time
}

// NewKeys returns the keys signed with secret (at least 32 bytes).
func NewKeys(secret string) (*Keys, error) {
	if len(secret) < 32 {
		return nil, errors.New("LICENSES_SIGNING_KEY: at least 32 bytes are required (openssl rand -hex 32)")
	}
	return &Keys{secret: []byte(secret), now: time.Now}, nil
}

type keyPayload struct {
	Tenant  string   `json:"t"`
	User    string   `json:"u"`
	Scopes  []string `json:"s"`
	Expires int64    `json:"e"`
}

// Mint returns a key for tenant and user with scopes, valid for ttl.
func (k *Keys) Mint(tenant, user string, ttl time.Duration, scopes ...string) string {
	p, _ := json.Marshal(keyPayload{Tenant: tenant, User: user, Scopes: scopes, Expires: k.now().Add(ttl).Unix()})
	body := base64.RawURLEncoding.EncodeToString(p)
	return "lic_" + body + "." + k.sign(body)
}

func (k *Keys) sign(body string) string {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(body))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Authenticate is the service's idemgate.Options.Authenticate: the caller
// a valid key names, or an unauthenticated error saying what is wrong.
func (k *Keys) Authenticate(r *http.Request) (domain.Caller, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return domain.Caller{}, refused("an Authorization: Bearer lic_… key is required")
	}
	body, sig, ok := strings.Cut(strings.TrimPrefix(token, "lic_"), ".")
	if !ok || !strings.HasPrefix(token, "lic_") || !hmac.Equal([]byte(sig), []byte(k.sign(body))) {
		return domain.Caller{}, refused("the key is not one of ours")
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	var p keyPayload
	if err != nil || json.Unmarshal(raw, &p) != nil {
		return domain.Caller{}, refused("the key is not one of ours")
	}
	if k.now().Unix() >= p.Expires {
		return domain.Caller{}, refused("the key expired")
	}
	return domain.Caller{TenantID: p.Tenant, UserID: p.User, Scopes: p.Scopes}, nil
}

func refused(msg string) error {
	return &domain.Error{Code: domain.CodeUnauthenticated, Field: "Authorization", Message: msg}
}
