package api

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"net/http"
	"strings"
)

// pageFiles are the api's own pages: each a directory with page.html,
// page.css and page.js.
//
//go:embed resetpage approvalpage
var pageFiles embed.FS

// staticPage is one of the api's pages with its style and script inline
// (nothing else loaded), and the Content-Security-Policy that allows
// exactly those two, by their hashes, and requests to the api itself.
type staticPage struct {
	html []byte
	csp  string
}

// buildPage assembles the page of dir: page.html with {{STYLE}} and
// {{SCRIPT}} replaced by page.css and page.js.
func buildPage(dir string) *staticPage {
	read := func(name string) string {
		b, err := pageFiles.ReadFile(dir + "/" + name)
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
	csp := "default-src 'none'; script-src " + hash(script) + "; style-src " + hash(style) +
		"; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return &staticPage{html: []byte(html), csp: csp}
}

// ServeHTTP answers the page, the same bytes for every request: never
// cached, never framed, no referrer sent from it.
func (p *staticPage) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", p.csp)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(p.html)
}
