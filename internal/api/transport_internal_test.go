package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

func TestOriginAllowed(t *testing.T) {
	t.Parallel()
	own := map[string]bool{}
	listed := map[string]bool{"https://app.example.com": true, "http://127.0.0.1:3000": true}
	for _, c := range []struct {
		host    string
		origins []string
		allowed map[string]bool
		want    bool
	}{
		{"127.0.0.1:8080", nil, own, true},
		{"127.0.0.1:8080", []string{"http://127.0.0.1:8080"}, own, true},
		{"idemgate.example.com", []string{"https://idemgate.example.com"}, own, true},
		{"idemgate.example.com:443", []string{"https://IDEMGATE.example.com:443"}, own, true},
		{"127.0.0.1:8080", []string{"http://evil.example.com"}, own, false},
		{"127.0.0.1:8080", []string{"http://127.0.0.1:8081"}, own, false},
		{"127.0.0.1:8080", []string{"null"}, own, false},
		{"127.0.0.1:8080", []string{"http://127.0.0.1:8080/path"}, own, false},
		{"127.0.0.1:8080", []string{"file://127.0.0.1:8080"}, own, false},
		{"127.0.0.1:8080", []string{"http://127.0.0.1:8080", "http://evil.example.com"}, own, false},
		{"127.0.0.1:8080", []string{"https://app.example.com"}, listed, true},
		{"127.0.0.1:8080", []string{"https://app.example.com:443"}, listed, true},
		{"127.0.0.1:8080", []string{"http://127.0.0.1:3000"}, listed, true},
		// A list replaces the default: the own origin must be listed.
		{"127.0.0.1:8080", []string{"http://127.0.0.1:8080"}, listed, false},
		{"127.0.0.1:8080", []string{"http://app.example.com"}, listed, false},
		{"127.0.0.1:8080", nil, listed, true},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://"+c.host+"/mcp", nil)
		for _, o := range c.origins {
			r.Header.Add("Origin", o)
		}
		require.Equal(t, c.want, originAllowed(r, c.allowed), "Host %s, Origin %v, allowed %v", c.host, c.origins, c.allowed)
	}
}

// TestMethodTableIsTheSDKs keeps sdkMethods true to the SDK the binary is
// built with: the SDK handles every method listed, with the flags listed,
// and refuses one that is not.
func TestMethodTableIsTheSDKs(t *testing.T) {
	t.Parallel()
	server := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	send := func(body string) (int, string) {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(body)).WithContext(context.Background())
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	const notHandled = "JSON RPC not handled"
	for m, flags := range sdkMethods {
		if flags&methodNotification != 0 {
			_, body := send(`{"jsonrpc":"2.0","method":"` + m + `","params":{}}`)
			require.NotContains(t, body, notHandled, m)
			_, body = send(`{"jsonrpc":"2.0","id":1,"method":"` + m + `","params":{}}`)
			require.Contains(t, body, "unexpected id", "%s is a notification", m)
			continue
		}
		_, body := send(`{"jsonrpc":"2.0","id":1,"method":"` + m + `","params":{}}`)
		require.NotContains(t, body, notHandled, m)
		_, body = send(`{"jsonrpc":"2.0","id":1,"method":"` + m + `"}`)
		require.Equal(t, flags&methodParamsOptional == 0, strings.Contains(body, `missing required "params"`), "%s: %s", m, body)
	}
	_, body := send(`{"jsonrpc":"2.0","id":1,"method":"no/such/method"}`)
	require.Contains(t, body, notHandled)
}
