package api_test

// The MCP fast path (api/mcpfast.go) must answer exactly what the MCP SDK
// answers. These tests run two api servers on one gate and one database,
// one with the fast path (the default) and one with Config.SDKOnlyMCP, and
// send every request to both: the status, the headers (but Date and
// X-Request-Id) and the body must be equal byte for byte. A request that
// changes state (the first call with a key) goes to the SDK server first,
// then to both, so both answer from the same state; the accepted answer
// itself is compared apart, with its own key on each side.
//
// Which path served a request shows in the fast server's metric
// idemgate_mcp_requests_total{path="fast"}. Each case says which path
// must serve it.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

type mcpPair struct {
	fast, sdk *httptest.Server
	store     core.Store
	pool      *pgxpool.Pool
	// metrics are the fast server's.
	metrics *prometheus.Registry
}

// mcpPairSetup is mcpPairSetupWith with the duplicate guard off: the
// pair's tests send the same arguments under fresh keys on purpose (the
// fast path against the SDK); the guard's own tests turn it on.
func mcpPairSetup(tb testing.TB) *mcpPair {
	tb.Helper()
	return mcpPairSetupWith(tb, func(cfg *config.Config) { cfg.DuplicateWindow = 0 })
}

// mcpPairSetupWith is the api twice on one database (the fast path and
// the SDK alone), its configuration changed by edit.
func mcpPairSetupWith(tb testing.TB, edit func(*config.Config)) *mcpPair {
	tb.Helper()
	ctx := context.Background()
	dbURL, pool := pgtest.NewDB(tb)
	data := pgengine.New(pool)
	_, err := data.Seed(ctx, &store.SeedFile{
		Rows: &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}}},
		Tokens: []store.SeedToken{
			{Tenant: "acme", User: "fuzz", Scopes: []string{"billing:refund", "billing:credit", "seats:reset", "users:password_reset", "operations:read"}, Token: fuzzTokenAll},
			{Tenant: "acme", User: "fuzz-reader", Scopes: []string{"operations:read"}, Token: fuzzTokenRead},
		},
	})
	require.NoError(tb, err)
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	edit(cfg)
	discard := slog.New(slog.DiscardHandler)
	a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(pool, cfg.Pooled()), discard, &app.APIOptions{RateLimit: -1})
	require.NoError(tb, err)
	p := &mcpPair{store: a.Gate.Store(), pool: pool, metrics: prometheus.NewRegistry()}
	for _, sdkOnly := range []bool{false, true} {
		var reg prometheus.Registerer = prometheus.NewRegistry()
		if !sdkOnly {
			reg = p.metrics
		}
		srv, err := api.New(&api.Config{
			Gate:       a.Gate,
			Auth:       tenancy.NewAuthenticator(data, tenancy.DefaultTokenCacheTTL, time.Now),
			Tools:      a.Tools,
			Jobs:       a.Jobs,
			RateLimit:  -1,
			Logger:     discard,
			Registerer: reg,
			SDKOnlyMCP: sdkOnly,
		})
		require.NoError(tb, err)
		ts := httptest.NewServer(srv)
		tb.Cleanup(ts.Close)
		if sdkOnly {
			p.sdk = ts
		} else {
			p.fast = ts
		}
	}
	return p
}

// fastCalls is the fast server's count of requests the fast path served.
func (p *mcpPair) fastCalls(tb testing.TB) float64 {
	tb.Helper()
	families, err := p.metrics.Gather()
	require.NoError(tb, err)
	for _, f := range families {
		if f.GetName() != "idemgate_mcp_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "path" && l.GetValue() == "fast" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// mcpAnswer is an HTTP answer, as compared.
type mcpAnswer struct {
	status int
	header http.Header
	body   string
}

func (a mcpAnswer) String() string {
	return fmt.Sprintf("%d %v\n%s", a.status, a.header, a.body)
}

// mcpRequest is one request to /mcp: header values replace the defaults
// (an empty value removes the header).
type mcpRequest struct {
	method string
	header map[string]string
	body   string
}

func (p *mcpPair) send(tb testing.TB, srv *httptest.Server, r mcpRequest) mcpAnswer {
	tb.Helper()
	method := r.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, srv.URL+"/mcp", strings.NewReader(r.body))
	require.NoError(tb, err)
	req.Header.Set("Authorization", "Bearer "+fuzzTokenAll)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range r.header {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := srv.Client().Do(req)
	require.NoError(tb, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(tb, err)
	h := resp.Header.Clone()
	h.Del("Date")
	h.Del("X-Request-Id")
	return mcpAnswer{status: resp.StatusCode, header: h, body: string(body)}
}

// compare sends r to the SDK server (so that both servers answer from
// the state it leaves), then to the fast server and the SDK server, and
// requires equal answers; it returns the fast server's answer and
// whether the fast path served it.
func (p *mcpPair) compare(tb testing.TB, r mcpRequest) (mcpAnswer, bool) {
	tb.Helper()
	p.send(tb, p.sdk, r)
	before := p.fastCalls(tb)
	fast := p.send(tb, p.fast, r)
	servedFast := p.fastCalls(tb) > before
	sdk := p.send(tb, p.sdk, r)
	for _, a := range []*mcpAnswer{&fast, &sdk} {
		n := nextAttempt.ReplaceAllString(a.body, "${1}X")
		n = queuedAt.ReplaceAllString(n, "${1}X")
		if n != a.body {
			a.body = n
			a.header.Del("Content-Length")
		}
	}
	require.Equal(tb, sdk.String(), fast.String(), "request %s %v\n%s", r.method, r.header, r.body)
	return fast, servedFast
}

// nextAttempt matches an operation's next_attempt_at, which a queued
// operation's status reports as of the moment it is read.
var nextAttempt = regexp.MustCompile(`(\\?"next_attempt_at\\?":\\?")[^"\\]*`)

// queuedAt matches the same moment in a queued task's status message
// ("queued at 2026-12-04T17:45:35Z", or "queued: attempt 2 next at …").
var queuedAt = regexp.MustCompile(`(queued[^"\\]* at )\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

// Header sets of the protocol versions.
var (
	legacy = map[string]string{"Mcp-Protocol-Version": "2025-11-25"}
	// stateless is SEP-2575 (2026-07-28), as the go-sdk client sends it;
	// Mcp-Name is the tool's.
	statelessMeta = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
)

func stateless(tool string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
}

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// call is a tools/call body with this id, tool and arguments, and the
// stateless _meta when meta is set.
func call(id, tool, args string, meta bool) string {
	params := `"name":"` + tool + `","arguments":` + args
	if meta {
		params = statelessMeta + "," + params
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{` + params + `}}`
}

const (
	eqCredit   = `{"customer_id":"cus_1","amount_cents":250,"currency":"usd","idempotency_key":"eq-inflight-0001"}`
	eqReplay   = `{"customer_id":"cus_1","amount_cents":250,"currency":"usd","idempotency_key":"eq-replayed-001"}`
	eqFailed   = `{"order_id":"ord_9f2","amount_cents":100,"idempotency_key":"eq-failed-00001"}`
	eqConflict = `{"customer_id":"cus_1","amount_cents":999,"currency":"usd","idempotency_key":"eq-inflight-0001"}`
)

// finish makes the claim of (tool, key) terminal: succeeded, or failed
// with a stored error.
func (p *mcpPair) finish(t testing.TB, tool, key string, fail bool) {
	t.Helper()
	ctx := context.Background()
	c, err := p.store.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: tool, IdempotencyKey: key})
	require.NoError(t, err)
	c, err = p.store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	if fail {
		_, err = p.store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: vocab.ErrorInfo{Code: "card_declined", Message: "the card <was> declined & \u2028 \"refused\""}})
	} else {
		_, err = p.store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: c.Epoch, Result: json.RawMessage(`{"balance_cents":250,"note":"a <b> & c"}`)})
	}
	require.NoError(t, err)
}

// mcpEquivalenceCases are the requests compared, and whether the fast
// path serves each.
func mcpEquivalenceCases() []struct {
	name string
	req  mcpRequest
	fast bool
} {
	type c = struct {
		name string
		req  mcpRequest
		fast bool
	}
	cases := []c{}
	add := func(name string, fast bool, header map[string]string, body string) {
		cases = append(cases, c{name, mcpRequest{header: header, body: body}, fast})
	}
	// The outcomes, on every protocol version the fast path serves.
	outcomes := []struct{ name, tool, args string }{
		{"InFlight", "apply_credit", eqCredit},
		{"Replayed", "apply_credit", eqReplay},
		{"ReplayedFailure", "refund_order", eqFailed},
		{"Conflict", "apply_credit", eqConflict},
		{"InvalidAmount", "apply_credit", `{"customer_id":"cus_1","amount_cents":-1,"currency":"usd","idempotency_key":"eq-invalid-0001"}`},
		{"KeyMissing", "apply_credit", `{"customer_id":"cus_1","amount_cents":1,"currency":"usd"}`},
		{"KeyInvalid", "apply_credit", `{"customer_id":"cus_1","amount_cents":1,"currency":"usd","idempotency_key":"bad key!"}`},
		{"UnknownArgument", "apply_credit", `{"customer_id":"cus_1","amount_cents":1,"currency":"usd","idempotency_key":"eq-unknown-001","x":1}`},
		{"DuplicateArgument", "apply_credit", `{"customer_id":"cus_1","customer_id":"cus_2","amount_cents":1,"currency":"usd","idempotency_key":"eq-dup-000001"}`},
		{"EmptyArguments", "refund_order", `{}`},
		{"ArgumentsWithSpace", "apply_credit", " {\n \"customer_id\" : \"cus_1\" ,\"amount_cents\":250,\"currency\":\"usd\",\"idempotency_key\":\"eq-inflight-0001\" } "},
		{"HTMLAndUnicode", "apply_credit", `{"customer_id":"<cus>&\u2028é","amount_cents":1,"currency":"usd","idempotency_key":"eq-html-000001"}`},
		{"GetOperation", "get_operation", `{"tool":"apply_credit","idempotency_key":"eq-replayed-001"}`},
		{"GetOperationNotFound", "get_operation", `{"tool":"apply_credit","idempotency_key":"eq-nothing-0001"}`},
		{"GetOperationBadTool", "get_operation", `{"tool":"nope","idempotency_key":"eq-nothing-0001"}`},
		{"ListOperations", "list_operations", `{"tool":"apply_credit"}`},
	}
	for _, o := range outcomes {
		add(o.name+"/Legacy", true, legacy, call("7", o.tool, o.args, false))
		add(o.name+"/Stateless", true, stateless(o.tool), call("7", o.tool, o.args, true))
	}
	for _, v := range []string{"", "2025-06-18", "2025-03-26", "2024-11-05"} {
		add("Version"+v, true, with(legacy, "Mcp-Protocol-Version", v), call("1", "apply_credit", eqCredit, false))
	}
	// Ids: the fast path writes back strings of printable ASCII and
	// integers of up to 15 digits; the SDK answers the others.
	for _, id := range []string{`0`, `-7`, `123456789012345`, `"abc"`, `""`, `"a<b>&c d"`, `"x-1"`} {
		add("Id"+id, true, legacy, call(id, "apply_credit", eqCredit, false))
		add("Id"+id+"/Stateless", true, stateless("apply_credit"), call(id, "apply_credit", eqCredit, true))
	}
	for _, id := range []string{`1234567890123456`, `9007199254740993`, `1.0`, `1.5`, `1e2`, `-0`, `"é"`, `"\u0041"`, `"a\"b"`, `true`, `{}`, `[1]`} {
		add("Id"+id, false, legacy, call(id, "apply_credit", eqCredit, false))
	}
	// Protocol versions and headers.
	// The TypeScript SDK's member order and headers.
	add("TypeScriptClient", true, with(legacy, "Accept-Language", "*", "Sec-Fetch-Mode", "cors", "User-Agent", "node"),
		`{"method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`},"jsonrpc":"2.0","id":1}`)
	sdk := func(name string, header map[string]string, body string) { add(name, false, header, body) }
	sdk("VersionUnknownOld", with(legacy, "Mcp-Protocol-Version", "2020-01-01"), call("1", "apply_credit", eqCredit, false))
	sdk("VersionUnknownNew", with(legacy, "Mcp-Protocol-Version", "2099-01-01"), call("1", "apply_credit", eqCredit, false))
	sdk("VersionGarbage", with(legacy, "Mcp-Protocol-Version", "garbage"), call("1", "apply_credit", eqCredit, false))
	sdk("StatelessWithoutMeta", stateless("apply_credit"), call("1", "apply_credit", eqCredit, false))
	sdk("LegacyWithMeta", legacy, call("1", "apply_credit", eqCredit, true))
	sdk("NoVersionWithMeta", map[string]string{}, call("1", "apply_credit", eqCredit, true))
	sdk("StatelessNameMismatch", with(stateless("apply_credit"), "Mcp-Name", "refund_order"), call("1", "apply_credit", eqCredit, true))
	sdk("StatelessMethodMissing", with(stateless("apply_credit"), "Mcp-Method", ""), call("1", "apply_credit", eqCredit, true))
	sdk("StatelessNameMissing", with(stateless("apply_credit"), "Mcp-Name", ""), call("1", "apply_credit", eqCredit, true))
	metaCall := func(meta string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":` + meta + `,"name":"apply_credit","arguments":` + eqCredit + `}}`
	}
	for name, meta := range map[string]string{
		"MetaVersionOnly":     `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`,
		"MetaVersionMismatch": `{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`,
		"MetaCapsNull":        `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":null}`,
		"MetaCapsString":      `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":"x"}`,
		"MetaInfoString":      `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":"x"}`,
		"MetaProgressToken":   `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":"p1"}`,
		"MetaLogLevel":        `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"}`,
		"MetaRootsBad":        `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":"yes"}}}`,
		"MetaSampling":        `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{"tools":{}}}}`,
		"MetaDuplicate":       `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientCapabilities":{}}`,
	} {
		sdk(name, stateless("apply_credit"), metaCall(meta))
	}
	for name, meta := range map[string]string{
		"MetaMinimal":   `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`,
		"MetaFullInfo":  `{"io.modelcontextprotocol/clientInfo":{"name":"n","title":"t","version":"v","description":"d","websiteUrl":"u"},"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{},"sampling":{},"elicitation":{},"experimental":{}}}`,
		"MetaRootsFals": `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":false}}}`,
	} {
		add(name, true, stateless("apply_credit"), metaCall(meta))
	}
	sdk("ContentTypeText", with(legacy, "Content-Type", "text/plain"), call("1", "apply_credit", eqCredit, false))
	add("ContentTypeCharset", true, with(legacy, "Content-Type", "application/json; charset=utf-8"), call("1", "apply_credit", eqCredit, false))
	sdk("AcceptJSONOnly", with(legacy, "Accept", "application/json"), call("1", "apply_credit", eqCredit, false))
	add("AcceptWildcard", true, with(legacy, "Accept", "*/*"), call("1", "apply_credit", eqCredit, false))
	sdk("LastEventID", with(legacy, "Last-Event-ID", "x_1"), call("1", "apply_credit", eqCredit, false))
	sdk("HostNotLoopback", with(legacy, "Host", "example.com"), call("1", "apply_credit", eqCredit, false))
	add("HostLocalhost", true, with(legacy, "Host", "localhost"), call("1", "apply_credit", eqCredit, false))
	add("SessionIDIgnored", true, with(legacy, "Mcp-Session-Id", "abc"), call("1", "apply_credit", eqCredit, false))
	// Envelopes the fast path leaves to the SDK (or to singleCall and the
	// task layer).
	sdk("UnknownTool", legacy, call("1", "no_such_tool", `{}`, false))
	sdk("UnknownToolStateless", stateless("no_such_tool"), call("1", "no_such_tool", `{}`, true))
	sdk("ArgumentsString", legacy, call("1", "apply_credit", `"x"`, false))
	sdk("ArgumentsNull", legacy, call("1", "apply_credit", `null`, false))
	sdk("ArgumentsArray", legacy, call("1", "apply_credit", `[]`, false))
	sdk("ArgumentsMissing", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit"}}`)
	sdk("NameNumber", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":1,"arguments":{}}}`)
	sdk("NameEscaped", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply\u005fcredit","arguments":`+eqCredit+`}}`)
	sdk("ParamsArray", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}`)
	sdk("ParamsMissing", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
	sdk("ParamsNull", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`)
	sdk("ParamsUnknownMember", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`,"requestState":"x"}}`)
	sdk("TaskCall", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`,"task":{}}}`)
	sdk("Notification", legacy, `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`}}`)
	sdk("NullID", legacy, call("null", "apply_credit", eqCredit, false))
	sdk("InitializedNotification", legacy, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	sdk("JSONRPC1", legacy, `{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`}}`)
	sdk("JSONRPCMissing", legacy, `{"id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`}}`)
	sdk("TopLevelUnknown", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`},"extra":1}`)
	sdk("TopLevelCase", legacy, `{"jsonrpc":"2.0","id":1,"Method":"x","method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`}}`)
	sdk("DuplicateID", legacy, `{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"apply_credit","arguments":`+eqCredit+`}}`)
	sdk("DuplicateParamsName", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order","name":"apply_credit","arguments":`+eqCredit+`}}`)
	sdk("DuplicateArgumentsMember", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":{},"arguments":`+eqCredit+`}}`)
	sdk("Batch", legacy, `[`+call("1", "apply_credit", eqCredit, false)+`]`)
	sdk("Malformed", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":{`)
	sdk("Trailing", legacy, call("1", "apply_credit", eqCredit, false)+`{}`)
	sdk("Empty", legacy, ``)
	sdk("InvalidUTF8", legacy, call("1", "apply_credit", "{\"customer_id\":\"\xff\",\"amount_cents\":1,\"currency\":\"usd\",\"idempotency_key\":\"eq-utf8-000001\"}", false))
	// Numbers beyond float64: the SDK's check of Mcp-Name decodes the
	// arguments on the sessionless protocol and refuses them; the tool's
	// decoder refuses them on the others.
	sdk("NumberBeyondFloat64/Stateless", stateless("apply_credit"), call("1", "apply_credit", `{"customer_id":"cus_1","amount_cents":1e400,"currency":"usd","idempotency_key":"eq-float-00001"}`, true))
	add("NumberBeyondFloat64/Legacy", true, legacy, call("1", "apply_credit", `{"customer_id":"cus_1","amount_cents":1e400,"currency":"usd","idempotency_key":"eq-float-00001"}`, false))
	sdk("DeepArguments", legacy, call("1", "apply_credit", `{"x":`+strings.Repeat(`[`, 70)+strings.Repeat(`]`, 70)+`}`, false))
	sdk("ToolsList", legacy, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	sdk("Initialize", map[string]string{}, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	sdk("Ping", legacy, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	cases = append(cases, c{"Get", mcpRequest{method: http.MethodGet, header: legacy}, false})
	return cases
}

// prepare makes the state the cases answer from: a queued claim
// (in_flight, conflict), a succeeded one and a failed one (replays).
func (p *mcpPair) prepare(t testing.TB) {
	t.Helper()
	for _, c := range []struct{ tool, args, key string }{
		{"apply_credit", eqCredit, ""},
		{"apply_credit", eqReplay, "eq-replayed-001"},
		{"refund_order", eqFailed, "eq-failed-00001"},
	} {
		ans := p.send(t, p.sdk, mcpRequest{header: legacy, body: call("1", c.tool, c.args, false)})
		require.Contains(t, ans.body, `"outcome":"accepted"`, ans.body)
		if c.key != "" {
			p.finish(t, c.tool, c.key, c.tool == "refund_order")
		}
	}
}

func TestMCPFastPathAnswersAsTheSDK(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	p.prepare(t)
	for _, c := range mcpEquivalenceCases() {
		t.Run(c.name, func(t *testing.T) {
			ans, fast := p.compare(t, c.req)
			require.Equal(t, c.fast, fast, "served by the fast path: %s", ans)
		})
	}
	// What the outcome cases answered, so that the comparison compares
	// what it should.
	for name, want := range map[string]string{
		"Replayed":        `"outcome":"replayed"`,
		"ReplayedFailure": `"code":"card_declined"`,
		"Conflict":        `"code":"idempotency_key_reuse_with_different_args"`,
		"InFlight":        `"outcome":"in_flight"`,
	} {
		ans, _ := p.compare(t, mcpRequest{header: legacy, body: call("1", map[bool]string{true: "refund_order", false: "apply_credit"}[name == "ReplayedFailure"],
			map[string]string{"Replayed": eqReplay, "ReplayedFailure": eqFailed, "Conflict": eqConflict, "InFlight": eqCredit}[name], false)})
		require.Contains(t, ans.body, want, name)
	}
}

// volatile matches what differs between two accepted answers: the
// operation's id, key, job and times, in the structured content and in
// its JSON text.
var volatile = regexp.MustCompile(`(\\?"(?:operation_id|idempotency_key|created_at|updated_at)\\?":\\?")[^"\\]*|(\\?"job_id\\?":)[0-9]+`)

func TestMCPFastPathAcceptsAsTheSDK(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	for i, proto := range []struct {
		header map[string]string
		meta   bool
	}{{legacy, false}, {stateless("apply_credit"), true}, {map[string]string{}, false}} {
		args := func(side string) string {
			return fmt.Sprintf(`{"customer_id":"cus_1","amount_cents":250,"currency":"usd","idempotency_key":"eq-accept-%s-%d"}`, side, i)
		}
		before := p.fastCalls(t)
		fast := p.send(t, p.fast, mcpRequest{header: proto.header, body: call("3", "apply_credit", args("fast"), proto.meta)})
		require.Equal(t, before+1, p.fastCalls(t), "served by the fast path")
		sdk := p.send(t, p.sdk, mcpRequest{header: proto.header, body: call("3", "apply_credit", args("sdk0"), proto.meta)})
		require.Contains(t, fast.body, `"outcome":"accepted"`)
		for _, a := range []*mcpAnswer{&fast, &sdk} {
			a.body = volatile.ReplaceAllString(a.body, "$1$2X")
			a.header.Del("Content-Length")
		}
		require.Equal(t, sdk.String(), fast.String())
	}
}

// FuzzMCPFastPath sends fuzzed bodies with one of the header sets to both
// servers: the answers must be equal.
func FuzzMCPFastPath(f *testing.F) {
	p := mcpPairSetup(f)
	p.prepare(f)
	headers := []map[string]string{legacy, stateless("apply_credit"), {}, stateless("get_operation")}
	for _, c := range mcpEquivalenceCases() {
		if c.req.method != "" || len(c.req.header) > 1 && c.req.header["Mcp-Method"] == "" {
			continue
		}
		for i, h := range headers {
			if fmt.Sprint(h) == fmt.Sprint(c.req.header) {
				f.Add(uint8(i), []byte(c.req.body))
			}
		}
	}
	f.Fuzz(func(t *testing.T, header uint8, body []byte) {
		p.compare(t, mcpRequest{header: pick(headers, header), body: string(body)})
	})
}
