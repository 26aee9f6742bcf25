package api_test

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/api"
)

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// The approval page is the same static page for every id, served without
// credentials: no data in it, its inline script and style allowed by their
// hashes and nothing else, never cached, framed or referred.
func TestApprovalPage(t *testing.T) {
	t.Parallel()
	url := serveApprovals(t)
	resp, page := get(t, url+api.ApprovalPagePath+"op_0123456789abcdef")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))

	csp := resp.Header.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'none'", "connect-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"} {
		require.Contains(t, csp, d)
	}
	// The hashes are those of the inline script and style, the only ones.
	for _, c := range []struct{ directive, tag string }{{"script-src", "script"}, {"style-src", "style"}} {
		m := regexp.MustCompile(`(?s)<`+c.tag+`>(.*?)</`+c.tag+`>`).FindAllStringSubmatch(page, -1)
		require.Len(t, m, 1, "one inline %s", c.tag)
		sum := sha256.Sum256([]byte(m[0][1]))
		require.Contains(t, csp, c.directive+" 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"';")
	}

	require.NotContains(t, page, "op_0123456789abcdef", "the page reads the id from its URL, not from the server")
	require.NotContains(t, page, "{{", "every placeholder filled")
	require.Contains(t, page, "/v1/approvals/")
	require.Contains(t, page, `type="password"`)
	require.Contains(t, page, "sessionStorage")
	require.NotContains(t, page, "localStorage")
	require.NotContains(t, page, "innerHTML", "the api's answers are shown as text")
	for _, external := range []string{"src=", "href=", "@import", "url("} {
		require.NotContains(t, page, external, "no external assets")
	}

	// Every id gets the same bytes; the prefix alone and other methods do
	// not serve it.
	_, other := get(t, url+api.ApprovalPagePath+"op_other")
	require.Equal(t, page, other)
	resp, _ = get(t, url+api.ApprovalPagePath)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, err := http.Post(url+api.ApprovalPagePath+"op_0123456789abcdef", "application/x-www-form-urlencoded", strings.NewReader("decision=approve"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}
