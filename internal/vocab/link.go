package vocab

import (
	"errors"
	"net"
	"net/url"
)

// MaxLinkBaseLen bounds a password-reset link base.
const MaxLinkBaseLen = 1024

// CheckLinkBase checks a password-reset link base, the page a reset mail
// links to as base?token=…: an absolute http or https URL with a host that
// names a machine (not 0.0.0.0 or [::], which only listeners use), without
// credentials, fragment or token parameter of its own. The error says what
// is wrong, without the value.
func CheckLinkBase(s string) error {
	if len(s) > MaxLinkBaseLen {
		return errors.New("is longer than 1024 bytes")
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("is not an absolute http or https URL")
	case u.Opaque != "" || u.Hostname() == "":
		return errors.New("has no host")
	case u.User != nil:
		return errors.New("must not carry credentials")
	case u.Fragment != "" || u.RawFragment != "":
		return errors.New("must not have a fragment")
	case u.Query().Has("token"):
		return errors.New("must not have a token parameter: the mail adds it")
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return errors.New("names " + u.Hostname() + ", a listening address no browser can open")
	}
	return nil
}
