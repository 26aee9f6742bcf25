package app_test

// The go-sdk v1.8.0 client's multi round-trip middleware (on by default)
// against the built api on both engines, over MCP 2026-07-28: the client
// answers the server's input_required through its ElicitationHandler and
// retries the call on its own. Refunds are counted at the test Stripe.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

const tokenAcmeApprover = "idg_test_acme_fin_lead"

// sentCall is a tools/call request as the client sent it.
type sentCall struct {
	version string
	params  struct {
		Arguments      map[string]any             `json:"arguments"`
		RequestState   *string                    `json:"requestState"`
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
		Meta           map[string]json.RawMessage `json:"_meta"`
	}
}

// recordingTransport adds the bearer token and records the tools/call
// requests sent through it.
type recordingTransport struct {
	token string
	mu    sync.Mutex
	calls []*sentCall
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+rt.token)
	if r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" {
			c := &sentCall{version: r.Header.Get("Mcp-Protocol-Version")}
			if err := json.Unmarshal(msg.Params, &c.params); err != nil {
				return nil, err
			}
			rt.mu.Lock()
			rt.calls = append(rt.calls, c)
			rt.mu.Unlock()
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// sent returns the tools/call requests recorded since the last call.
func (rt *recordingTransport) sent() []*sentCall {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := rt.calls
	rt.calls = nil
	return out
}

// elicitor is the client's ElicitationHandler: it records each request
// and answers with answer, which a step sets.
type elicitor struct {
	mu     sync.Mutex
	asked  []*mcp.ElicitParams
	answer func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)
}

func (e *elicitor) handle(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	e.mu.Lock()
	e.asked = append(e.asked, req.Params)
	answer := e.answer
	e.mu.Unlock()
	return answer(ctx, req.Params)
}

// reset sets the next step's answer and returns what was asked before.
func (e *elicitor) reset(answer func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)) []*mcp.ElicitParams {
	e.mu.Lock()
	defer e.mu.Unlock()
	asked := e.asked
	e.asked, e.answer = nil, answer
	return asked
}

// approveAs decides on operation id as the approval page does: it reads
// the approval (GET /v1/approvals/{id}) and approves its fingerprint.
func approveAs(t *testing.T, url, token, id string) error {
	shown := doHTTP(t, http.MethodGet, url+"/v1/approvals/"+id, token, nil, false)
	if shown.status != http.StatusOK || shown.json["status"] != string(vocab.StatusAwaitingApproval) {
		return &approvalError{shown.raw}
	}
	body, err := json.Marshal(map[string]any{"decision": "approve", "args_hash": shown.json["args_hash"]})
	require.NoError(t, err)
	decided := doHTTP(t, http.MethodPost, url+"/v1/approvals/"+id, token, body, false, "Content-Type", "application/json")
	if decided.status != http.StatusOK {
		return &approvalError{decided.raw}
	}
	return nil
}

type approvalError struct{ answer string }

func (e *approvalError) Error() string { return "approving failed: " + e.answer }

// TestGoSDKClientMRTR: a go-sdk v1.8 client that declares form and URL
// elicitation, on both engines. A re-minted key: the form question,
// confirmed makes exactly one more refund, declined none (the middleware
// gives up at its cap); an approval wait: the URL request names the page,
// another person of the tenant approves through the api, and the
// middleware's retry returns the outcome, one refund.
func TestGoSDKClientMRTR(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := context.Background()
		s := setupEdges(t, engine)
		_, err := s.db.Store.Seed(ctx, &store.SeedFile{
			Rows:    &tools.Seed{},
			Tenants: []store.SeedTenant{{Tenant: "acme", ApprovalThresholds: map[string]int64{"refund_order": 1000}}},
			Tokens:  []store.SeedToken{{Tenant: "acme", User: "fin-lead", Scopes: []string{"approvals:decide"}, Token: tokenAcmeApprover}},
		})
		require.NoError(t, err)
		s.startWorker()

		e := &elicitor{}
		rt := &recordingTransport{token: tokenAcme}
		client := mcp.NewClient(&mcp.Implementation{Name: "idemgate-mrtr-test", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: e.handle,
			// With a handler alone the client declares form mode only.
			Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{
				Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}}},
		})
		session, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint: s.url + "/mcp", HTTPClient: &http.Client{Transport: rt, Timeout: 30 * time.Second},
		}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = session.Close() })

		args := func(key string) map[string]any {
			a := refund(key, 150)
			a["reason"] = "parcel lost"
			return a
		}
		call := func(a map[string]any) (*result, bool, error) {
			res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "refund_order", Arguments: a})
			if err != nil {
				return nil, false, err
			}
			var out result
			require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out))
			return &out, res.IsError, nil
		}
		noQuestion := func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			t.Error("asked a question")
			return &mcp.ElicitResult{Action: "cancel"}, nil
		}

		// The first refund: no question.
		e.reset(noQuestion)
		first, isErr, err := call(args("mrtr-gosdk-k1"))
		require.NoError(t, err)
		require.False(t, isErr, "%+v", first.Error)
		sent := rt.sent()
		require.Len(t, sent, 1)
		require.Equal(t, "2026-07-28", sent[0].version, "the go-sdk client speaks 2026-07-28")
		require.Contains(t, string(sent[0].params.Meta["io.modelcontextprotocol/clientCapabilities"]), `"url":{}`)

		// Re-minted and confirmed: the form question naming the first, one
		// more operation, one more refund.
		e.reset(func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}, nil
		})
		second, isErr, err := call(args("mrtr-gosdk-k2"))
		require.NoError(t, err)
		require.False(t, isErr, "%+v", second.Error)
		asked := e.reset(noQuestion)
		require.Len(t, asked, 1)
		require.Equal(t, "form", asked[0].Mode)
		require.Contains(t, asked[0].Message, first.Operation.OperationID)
		require.Equal(t, vocab.OutcomeAccepted, second.Outcome)
		require.Equal(t, "mrtr-gosdk-k2", second.Operation.IdempotencyKey)
		require.NotEqual(t, first.Operation.OperationID, second.Operation.OperationID)
		sent = rt.sent()
		require.Len(t, sent, 2, "the call and the middleware's retry")
		require.NotNil(t, sent[1].params.RequestState)
		require.JSONEq(t, `{"action":"accept","content":{"confirm":true}}`, string(sent[1].params.InputResponses["confirm_new_intent"]))
		for _, key := range []string{"mrtr-gosdk-k1", "mrtr-gosdk-k2"} {
			awaitPatiently(t, s.session, key, vocab.StatusSucceeded)
		}
		require.Len(t, s.stripe.Refunds(), 2, "the first and the confirmed one")

		// Re-minted and declined: asked once; the retry with the person's
		// "no" gets the tool error possible_duplicate naming the earlier
		// operation; nothing claimed, no refund.
		e.reset(func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		})
		_ = rt.sent()
		declined, isErr, err := call(args("mrtr-gosdk-k3"))
		require.NoError(t, err)
		require.True(t, isErr)
		require.Equal(t, vocab.CodePossibleDuplicate, declined.Error.Code)
		require.Equal(t, second.Operation.OperationID, declined.Operation.OperationID, "names the latest intent of these arguments")
		asked = e.reset(noQuestion)
		require.Len(t, asked, 1)
		require.Equal(t, "form", asked[0].Mode)
		require.Len(t, rt.sent(), 2, "the call and its one retry")
		missing, isErr := callTool(t, s.session, "get_operation", map[string]any{"tool": "refund_order", "idempotency_key": "mrtr-gosdk-k3"})
		require.True(t, isErr)
		require.Equal(t, vocab.CodeNotFound, missing.Error.Code)

		// An approval wait: the URL request names the page; another person
		// of the tenant approves; the retry returns the outcome.
		var approved string
		e.reset(func(_ context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			if p.Mode != "url" {
				return nil, &approvalError{"not a URL request: " + p.Mode}
			}
			approved = p.URL[strings.LastIndex(p.URL, "/")+1:]
			if err := approveAs(t, s.url, tokenAcmeApprover, approved); err != nil {
				return nil, err
			}
			return &mcp.ElicitResult{Action: "accept"}, nil
		})
		big, isErr, err := call(refund("mrtr-gosdk-approval", 2000))
		require.NoError(t, err)
		require.False(t, isErr, "%+v", big.Error)
		asked = e.reset(noQuestion)
		require.Len(t, asked, 1)
		require.Contains(t, asked[0].URL, "/approvals/"+big.Operation.OperationID)
		require.Contains(t, asked[0].Message, big.Operation.OperationID)
		require.Equal(t, big.Operation.OperationID, approved)
		require.NotEqual(t, vocab.StatusAwaitingApproval, big.Operation.Status, "the retry after the decision returns the outcome")
		sent = rt.sent()
		require.Len(t, sent, 2)
		require.JSONEq(t, `{"action":"accept"}`, string(sent[1].params.InputResponses["approval"]))
		done := awaitPatiently(t, s.session, "mrtr-gosdk-approval", vocab.StatusSucceeded)
		require.Equal(t, big.Operation.OperationID, done.OperationID)

		require.Len(t, s.stripe.Refunds(), 3)
		for k, n := range s.stripe.RefundsByKey() {
			require.Equal(t, 1, n, "downstream key %s", k)
		}
		require.Equal(t, 1, s.stripe.RefundsByMetadata("idemgate_operation_id")[big.Operation.OperationID])
		require.Equal(t, int64(150+150+2000), s.stripe.RefundedAmount("ch_123"))
	})
}
