package toolkit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

// URL is the harness's base URL: MCP at URL()+"/mcp", the REST twins at
// URL()+"/v1/tools/{name}".
func (h *Harness) URL() string { return h.url }

// Token mints a bearer token of Tenant (user "gatetest") holding exactly
// scopes; none: a token that may call nothing.
func (h *Harness) Token(t testing.TB, scopes ...string) string {
	t.Helper()
	return mintToken(t, h.tokens, append([]string{}, scopes...))
}

// MCP connects an MCP client session over Streamable HTTP to
// URL()+"/mcp" with the harness's token (every scope of the registry),
// closed when t's test ends.
func (h *Harness) MCP(t testing.TB) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "gatetest", Version: "1"}, nil)
	session, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:   h.url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token: h.token}, Timeout: AwaitTimeout},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close() })
	return session
}

// bearer adds the harness's token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(req)
}

// Read calls a read tool through its REST twin with args as the body and
// decodes its result into out (nil: ignore it). A refusal (not found,
// invalid arguments, a missing scope) is returned as a *domain.Error with
// its code; anything else the transport or the answer gets wrong fails t.
// A mutation is refused: use Call.
func (h *Harness) Read(t testing.TB, toolName string, args, out any) error {
	t.Helper()
	require.Nil(t, h.mutation(toolName), "%s is a mutation: use Call", toolName)
	if args == nil {
		args = map[string]any{}
	}
	body, err := json.Marshal(args)
	require.NoError(t, err)
	var vErr *vocab.Error
	poll(retryEvery, func() bool {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/v1/tools/"+toolName, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+h.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		if resp.StatusCode == http.StatusOK {
			if out != nil {
				require.NoError(t, json.Unmarshal(raw, out), string(raw))
			}
			vErr = nil
			return true
		}
		var problem struct {
			Error *vocab.Error `json:"error"`
		}
		require.NoError(t, json.Unmarshal(raw, &problem), "%d %s", resp.StatusCode, raw)
		require.NotNil(t, problem.Error, "%d without an error: %s", resp.StatusCode, raw)
		vErr = problem.Error
		return vErr.Code != vocab.CodeUnavailable // SQLite's one writer busy: retried, as the answer asks
	})
	if vErr == nil {
		return nil // not a nil *vocab.Error in an error
	}
	return vErr
}
