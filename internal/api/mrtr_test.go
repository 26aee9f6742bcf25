package api_test

// MCP 2026-07-28's multi round-trip requests: a call that needs a person
// answers input_required with an elicitation and a requestState, for a
// client that declared the elicitation mode on the request; the retry
// with the answer and the state is decided by the gate. A forged, altered
// or misused state is refused and changes nothing.

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

const elicitMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}}}}`

const plainMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// retryCall is a 2026-07-28 tools/call retry carrying requestState and
// inputResponses.
func retryCall(id, tool, args, state, responses string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{` + elicitMeta + `,"name":"` + tool +
		`","arguments":` + args + `,"requestState":` + state + `,"inputResponses":` + responses + `}}`
}

// rpcError is the JSON-RPC error of an answer, or nil.
func rpcError(t *testing.T, a mcpAnswer) *struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
} {
	t.Helper()
	var msg struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &msg), a.body)
	return msg.Error
}

func TestMRTRInputRequired(t *testing.T) {
	t.Parallel()
	p := mcpPairSetupWith(t, func(*config.Config) {}) // the default duplicate window
	ctx := context.Background()
	_, err := p.pool.Exec(ctx, `INSERT INTO approval_thresholds (tenant_id, tool, amount_cents) VALUES ('acme', 'apply_credit', 1000)`)
	require.NoError(t, err)
	_, err = p.pool.Exec(ctx, `INSERT INTO customers (tenant_id, customer_id, currency) VALUES ('acme', 'cus_1', 'usd') ON CONFLICT DO NOTHING`)
	require.NoError(t, err)
	credit := func(key string, cents string) string {
		return `{"customer_id":"cus_1","amount_cents":` + cents + `,"currency":"usd","idempotency_key":"` + key + `"}`
	}
	claims := func(cents int) int {
		var n int
		require.NoError(t, p.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_claims WHERE tool = 'apply_credit' AND (args->>'amount_cents')::int = $1`, cents).Scan(&n))
		return n
	}
	hdr := extHeaders("tools/call", "apply_credit")

	for i, srv := range []struct {
		name string
		s    *httptest.Server
	}{{"fast", p.fast}, {"sdk", p.sdk}} {
		t.Run(srv.name, func(t *testing.T) {
			// Amounts of this subtest's own, so that the two do not hold
			// each other's calls as duplicates.
			big, small := strconv.Itoa(5000+i), strconv.Itoa(301+i)

			// An approval wait: input_required with the page as a URL
			// elicitation, for a client that declared URL mode.
			key := "mrtr-approve-" + srv.name
			res := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr, body: extCall("1", "apply_credit", credit(key, big), elicitMeta)}))
			require.Equal(t, "input_required", res["resultType"], "%v", res)
			req := res["inputRequests"].(map[string]any)["approval"].(map[string]any)
			require.Equal(t, "elicitation/create", req["method"])
			params := req["params"].(map[string]any)
			require.Equal(t, "url", params["mode"])
			require.Contains(t, params["url"], "/approvals/")
			opID := params["url"].(string)[strings.LastIndex(params["url"].(string), "/")+1:]
			state, _ := json.Marshal(res["requestState"])
			require.Greater(t, len(state), 20)
			// A client without elicitation gets the waiting operation.
			plain := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr, body: extCall("2", "apply_credit", credit(key, big), plainMeta)}))
			require.Equal(t, "complete", plain["resultType"], "%v", plain)
			require.Equal(t, "awaiting_approval", plain["structuredContent"].(map[string]any)["operation"].(map[string]any)["status"])

			// The retry while it waits: asked again.
			again := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr,
				body: retryCall("3", "apply_credit", credit(key, big), string(state), `{"approval":{"action":"accept"}}`)}))
			require.Equal(t, "input_required", again["resultType"], "the client's answer is not the decision: %v", again)

			// Forged, altered, or presented with another call: refused,
			// nothing claimed.
			before := claims(5000 + i)
			for name, bad := range map[string]string{
				"forged":  `"eyJ2IjoxfQ.AAAA"`,
				"altered": `"` + strings.Replace(strings.Trim(string(state), `"`), ".", "A.", 1) + `"`,
				"garbage": `"not a state"`,
			} {
				e := rpcError(t, p.send(t, srv.s, mcpRequest{header: hdr,
					body: retryCall("4", "apply_credit", credit(key, big), bad, `{"approval":{"action":"accept"}}`)}))
				require.NotNil(t, e, name)
				require.Equal(t, -32602, e.Code, name)
				require.Contains(t, e.Message, "requestState", name)
			}
			e := rpcError(t, p.send(t, srv.s, mcpRequest{header: hdr,
				body: retryCall("5", "apply_credit", credit(key+"-other", big), string(state), `{"approval":{"action":"accept"}}`)}))
			require.NotNil(t, e)
			require.Contains(t, e.Message, "another call")
			require.Equal(t, before, claims(5000+i), "a refused state claims nothing")

			// Decided (denied here): the retry gets the outcome.
			c, err := p.store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: "acme", OperationID: opID})
			require.NoError(t, err)
			_, err = p.store.ClaimDecline(ctx, &core.ClaimDeclineParams{ID: c.ID, Error: vocab.ErrorInfo{Code: vocab.CodeApprovalDenied, Message: "no"}})
			require.NoError(t, err)
			done := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr,
				body: retryCall("6", "apply_credit", credit(key, big), string(state), `{"approval":{"action":"accept"}}`)}))
			require.Equal(t, "complete", done["resultType"], "%v", done)
			require.Equal(t, true, done["isError"])
			require.Contains(t, done["content"].([]any)[0].(map[string]any)["text"], "approval_denied")

			// A re-minted key: the duplicate question as a form.
			first := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr, body: extCall("7", "apply_credit", credit("mrtr-dup-a-"+srv.name, small), elicitMeta)}))
			require.Equal(t, "complete", first["resultType"], "%v", first)
			firstOp := first["structuredContent"].(map[string]any)["operation"].(map[string]any)["operation_id"].(string)
			dupArgs := credit("mrtr-dup-b-"+srv.name, small)
			asked := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr, body: extCall("8", "apply_credit", dupArgs, elicitMeta)}))
			require.Equal(t, "input_required", asked["resultType"], "%v", asked)
			form := asked["inputRequests"].(map[string]any)["confirm_new_intent"].(map[string]any)["params"].(map[string]any)
			require.Equal(t, "form", form["mode"])
			require.Contains(t, form["message"], firstOp)
			require.Contains(t, form["requestedSchema"].(map[string]any)["properties"], "confirm")
			dupState, _ := json.Marshal(asked["requestState"])
			// Without form elicitation: the tool error naming the first.
			held := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr, body: extCall("9", "apply_credit", dupArgs, plainMeta)}))
			require.Equal(t, true, held["isError"], "%v", held)
			require.Contains(t, held["content"].([]any)[0].(map[string]any)["text"], "possible_duplicate")
			// Declined: still held, nothing claimed.
			declined := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr,
				body: retryCall("10", "apply_credit", dupArgs, string(dupState), `{"confirm_new_intent":{"action":"decline"}}`)}))
			require.Equal(t, "complete", declined["resultType"], "not asked again: %v", declined)
			require.Equal(t, true, declined["isError"])
			require.Contains(t, declined["content"].([]any)[0].(map[string]any)["text"], "possible_duplicate")
			require.Equal(t, 1, claims(301+i))
			// The state on another key is refused.
			e = rpcError(t, p.send(t, srv.s, mcpRequest{header: hdr,
				body: retryCall("11", "apply_credit", credit("mrtr-dup-c-"+srv.name, small), string(dupState), `{"confirm_new_intent":{"action":"accept","content":{"confirm":true}}}`)}))
			require.NotNil(t, e)
			require.Equal(t, 1, claims(301+i))
			// Confirmed: one new operation; the same retry again replays it.
			var second string
			for j := range 2 {
				ok := resultOf(t, p.send(t, srv.s, mcpRequest{header: hdr,
					body: retryCall("12", "apply_credit", dupArgs, string(dupState), `{"confirm_new_intent":{"action":"accept","content":{"confirm":true}}}`)}))
				require.Equal(t, "complete", ok["resultType"], "%v", ok)
				require.NotEqual(t, true, ok["isError"], "%v", ok)
				op := ok["structuredContent"].(map[string]any)["operation"].(map[string]any)["operation_id"].(string)
				require.NotEqual(t, firstOp, op)
				if j == 0 {
					second = op
				}
				require.Equal(t, second, op)
			}
			require.Equal(t, 2, claims(301+i), "the confirmed one, once")
		})
	}
}
