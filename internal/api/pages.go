package api

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
)

// pageFiles are the api's own pages: each a directory with page.html,
// page.css and page.js.
//
//go:embed approvalpage
var pageFiles embed.FS

// staticPage is a page with its style and script inline (nothing else
// loaded), and the Content-Security-Policy that allows exactly those two,
// by their hashes, and requests to the api itself.
type staticPage struct {
	html []byte
	csp  string
}

// NewPage returns the handler of a static page built from dir in files:
// page.html with {{STYLE}} and {{SCRIPT}} replaced by page.css and page.js,
// answered as the api answers its own pages (the same bytes for every
// request, a Content-Security-Policy allowing exactly that style and
// script by their hashes and requests to the api itself, never cached,
// never framed, no referrer sent). It fails when a file is missing.
func NewPage(files fs.FS, dir string) (http.Handler, error) {
	var parts [3]string
	for i, name := range []string{"page.css", "page.js", "page.html"} {
		b, err := fs.ReadFile(files, dir+"/"+name)
		if err != nil {
			return nil, fmt.Errorf("api: page %s: %w", dir, err)
		}
		parts[i] = string(b)
	}
	style, script, page := parts[0], parts[1], parts[2]
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	html := strings.NewReplacer("{{STYLE}}", style, "{{SCRIPT}}", script).Replace(page)
	csp := "default-src 'none'; script-src " + hash(script) + "; style-src " + hash(style) +
		"; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return &staticPage{html: []byte(html), csp: csp}, nil
}

// buildPage is NewPage of one of the api's own pages, embedded at build
// time.
func buildPage(dir string) http.Handler {
	p, err := NewPage(pageFiles, dir)
	if err != nil {
		panic(err) // embedded at build time
	}
	return p
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
