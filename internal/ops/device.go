package ops

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DeviceCookie is the cookie that marks a browser where the operator's
// Basic login succeeded before (OWASP's device cookies): a request that
// carries a valid one is throttled on its own, not with its address, so
// failures from elsewhere behind the same address (a TLS proxy, a NAT)
// cannot lock the operator out. Without it, the address's lockout applies.
const DeviceCookie = "idemgate_ops_device"

// deviceCookieTTL is how long a device cookie stays valid.
const deviceCookieTTL = 30 * 24 * time.Hour

// Devices signs and checks device cookies with a key of their own.
type Devices struct {
	key []byte
	now func() time.Time
}

// NewDevices returns device cookies keyed by secret (the deployment's
// IDEMGATE_SECRET, so that every api process accepts the others'), or by a
// random key of this process when secret is empty (a cookie then holds for
// this process only; elsewhere the address's lockout applies).
func NewDevices(secret string) *Devices {
	key := make([]byte, 32)
	if secret == "" {
		_, _ = rand.Read(key)
	} else {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte("idemgate ops device cookies"))
		key = m.Sum(nil)
	}
	return &Devices{key: key, now: time.Now}
}

// issue returns a new cookie for user: a random device id, the expiry and
// their MAC.
func (d *Devices) issue(user string, secure bool) *http.Cookie {
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	exp := d.now().Add(deviceCookieTTL)
	payload := base64.RawURLEncoding.EncodeToString(id) + "." + strconv.FormatInt(exp.Unix(), 10)
	return &http.Cookie{Name: DeviceCookie, Value: payload + "." + d.mac(user, payload), Path: "/ops",
		Expires: exp, MaxAge: int(deviceCookieTTL.Seconds()), HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode}
}

// device returns the device id of r's cookie when it is valid for user.
func (d *Devices) device(r *http.Request, user string) (string, bool) {
	c, err := r.Cookie(DeviceCookie)
	if err != nil {
		return "", false
	}
	id, rest, ok := strings.Cut(c.Value, ".")
	if !ok {
		return "", false
	}
	expText, mac, ok := strings.Cut(rest, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(d.mac(user, id+"."+expText))) {
		return "", false
	}
	exp, err := strconv.ParseInt(expText, 10, 64)
	if err != nil || d.now().Unix() >= exp {
		return "", false
	}
	return id, true
}

func (d *Devices) mac(user, payload string) string {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
