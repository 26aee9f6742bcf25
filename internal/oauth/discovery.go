package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// maxMetadataBytes bounds an authorization server's metadata document.
const maxMetadataBytes = 1 << 20

// errNotFound is a metadata URL that answered 404: try the next one.
var errNotFound = errors.New("404 Not Found")

// discover returns the jwks_uri of issuer, read from its OpenID Connect
// discovery document or, if that is 404, its RFC 8414 metadata. The
// document's issuer must be issuer exactly (OpenID Discovery §4.3,
// RFC 8414 §3.3).
func discover(ctx context.Context, client *http.Client, issuer string) (string, error) {
	var lastErr error
	for _, u := range metadataURLs(issuer) {
		jwks, err := fetchMetadata(ctx, client, u, issuer)
		if errors.Is(err, errNotFound) {
			lastErr = err
			continue
		}
		return jwks, err
	}
	return "", lastErr
}

// metadataURLs are the places an issuer's metadata may be: OpenID Connect
// appends the well-known path to the issuer; RFC 8414 §3.1 inserts it
// between the host and the issuer's path.
func metadataURLs(issuer string) []string {
	oidcURL := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	u, err := url.Parse(issuer)
	if err != nil {
		return []string{oidcURL}
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	return []string{oidcURL, u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + path}
}

func fetchMetadata(ctx context.Context, client *http.Client, metadataURL, issuer string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metadataURL, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", metadataURL, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", fmt.Errorf("GET %s: %w", metadataURL, errNotFound)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("GET %s: %s", metadataURL, resp.Status)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("GET %s: not a metadata document: %w", metadataURL, err)
	}
	if doc.Issuer != issuer {
		return "", fmt.Errorf("GET %s: the document's issuer is %q, not the configured %q", metadataURL, doc.Issuer, issuer)
	}
	if u, err := url.Parse(doc.JWKSURI); err != nil || !secureURL(u) {
		return "", fmt.Errorf("GET %s: jwks_uri %q is not an https URL (or http on a loopback host)", metadataURL, doc.JWKSURI)
	}
	return doc.JWKSURI, nil
}
