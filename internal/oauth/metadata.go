package oauth

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// WellKnownPath is the RFC 9728 well-known path of protected resource
// metadata.
const WellKnownPath = "/.well-known/oauth-protected-resource"

// resourceMetadata is the RFC 9728 §2 document.
type resourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

func (v *Verifier) buildMetadata(cfg *Config) error {
	resource := cfg.Resource
	if resource == "" {
		resource = cfg.Audience
	}
	u, err := url.Parse(resource)
	if err != nil {
		return err // validate parsed it already
	}
	// RFC 9728 §3.1: the well-known path goes between the host and the
	// resource's path; a path of "/" alone adds nothing.
	v.metadataPath = WellKnownPath
	escaped := ""
	if u.Path != "/" {
		v.metadataPath += u.Path
		escaped = u.EscapedPath()
	}
	v.metadataURL = u.Scheme + "://" + u.Host + WellKnownPath + escaped
	v.metadataJSON, err = json.Marshal(resourceMetadata{
		Resource:               resource,
		AuthorizationServers:   []string{cfg.Issuer},
		BearerMethodsSupported: []string{"header"},
		ScopesSupported:        cfg.ScopesSupported,
		ResourceName:           cfg.ResourceName,
	})
	return err
}

// MetadataPath is the path at which Metadata is to be served: WellKnownPath
// followed by the path of Config.Resource, if any (RFC 9728 §3.1).
func (v *Verifier) MetadataPath() string { return v.metadataPath }

// MetadataURL is the absolute URL of the metadata, as challenges give it.
func (v *Verifier) MetadataURL() string { return v.metadataURL }

// Metadata serves the protected resource metadata (RFC 9728 §3.2) to GET
// and HEAD; other methods get 405. The document is public, so any origin
// may read it (browser-based MCP clients fetch it cross-origin).
func (v *Verifier) Metadata() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("Access-Control-Allow-Origin", "*")
		_, _ = w.Write(v.metadataJSON)
	})
}

// Challenge returns the WWW-Authenticate value of a 401 (RFC 6750 §3,
// RFC 9728 §5.1): `Bearer resource_metadata="..."`, scope when
// Config.ScopesSupported is set, and error="invalid_token" with an
// error_description when err is (or wraps) a *TokenError. For a request
// without a token pass nil: no error is named then (RFC 6750 §3.1).
func (v *Verifier) Challenge(err error) string {
	var b strings.Builder
	b.WriteString(`Bearer resource_metadata=`)
	b.WriteString(quote(v.metadataURL))
	if v.scopes != "" {
		b.WriteString(`, scope=`)
		b.WriteString(quote(v.scopes))
	}
	var te *TokenError
	if errors.As(err, &te) {
		b.WriteString(`, error="invalid_token", error_description=`)
		b.WriteString(quote(te.Detail))
	}
	return b.String()
}

// quote makes s a quoted-string whose content RFC 6750 §3 allows in
// error_description (%x20-21 / %x23-5B / %x5D-7E): other bytes are dropped.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' {
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
