package api

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"net/http"
	"strings"
)

// ResetPagePath is the api's own password-reset page, where the mails link
// unless IDEMGATE_RESET_LINK_BASE or the tenant's base says otherwise.
const ResetPagePath = "/reset-password"

//go:embed resetpage
var resetPageFiles embed.FS

// resetPage is the page with its style and script inline (no other
// request but the redeem), and resetPageCSP the Content-Security-Policy
// that allows exactly those two.
var resetPage, resetPageCSP = buildResetPage()

func buildResetPage() (page []byte, csp string) {
	read := func(name string) string {
		b, err := resetPageFiles.ReadFile("resetpage/" + name)
		if err != nil {
			panic(err) // embedded at build time
		}
		return string(b)
	}
	style, script := read("page.css"), read("page.js")
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	html := strings.NewReplacer("{{STYLE}}", style, "{{SCRIPT}}", script).Replace(read("page.html"))
	csp = "default-src 'none'; script-src " + hash(script) + "; style-src " + hash(style) +
		"; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return []byte(html), csp
}

// serveResetPage is GET /reset-password?token=…: a page whose button
// POSTs the token to the redeem route and shows the answer. Fetching the
// page redeems nothing, so a mail scanner that opens links does no harm.
func serveResetPage(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", resetPageCSP)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(resetPage)
}
