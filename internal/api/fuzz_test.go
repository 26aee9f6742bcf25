package api_test

// Fuzz tests of the api's HTTP handlers. They drive the assembled api
// (app.NewAPIWithOptions: the real gate, Postgres store, River inserts and
// authenticator) on a real test database of their own, through the handler
// in process (no network), and check after every input that:
//   - nothing panics and nothing answers 5xx;
//   - every answer is JSON (problem+json for errors) with our error code;
//   - the rows written match the answer: a rejection (400, 403) writes
//     exactly one denied audit row and nothing else, 401 and 404 write
//     nothing, an accepted mutation one claim, one job and one audit row,
//     an in-flight answer or a conflict one audit row only.
//
// The seed corpora run in the normal suite. Fuzz with, for example:
//
//	go test ./api -run '^$' -fuzz FuzzRESTTool -fuzztime 30s
//
// Each fuzzing worker process makes its own database, so the row counts are
// exact. The rate limit is off so that a fast fuzzer is not answered 429.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
)

const (
	fuzzTokenAll  = "idg_fuzz_acme_all"
	fuzzTokenRead = "idg_fuzz_acme_read"
)

// fuzzTools are the names a fuzz input picks from; the last is no tool.
var fuzzTools = []string{"refund_order", "apply_credit", "reset_seat", "send_password_reset", "get_operation", "get_order", "no_such_tool"}

// fuzzTokens are the bearer tokens a fuzz input picks from: every scope,
// reads only, unknown, none.
var fuzzTokens = []string{fuzzTokenAll, fuzzTokenRead, "idg_fuzz_unknown", ""}

type fuzzBundle struct {
	handler http.Handler
	pool    *pgxpool.Pool
}

func fuzzSetup(tb testing.TB) *fuzzBundle {
	tb.Helper()
	ctx := context.Background()
	dbURL, pool := pgtest.NewDB(tb)
	_, err := pgengine.New(pool).Seed(ctx, &store.SeedFile{
		Rows: &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}}},
		Tokens: []store.SeedToken{
			{Tenant: "acme", User: "fuzz", Scopes: []string{"billing:refund", "billing:credit", "seats:reset", "users:password_reset", "operations:read"}, Token: fuzzTokenAll},
			{Tenant: "acme", User: "fuzz-reader", Scopes: []string{"operations:read"}, Token: fuzzTokenRead},
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(pool, cfg.Pooled()), slog.New(slog.DiscardHandler), &app.APIOptions{RateLimit: -1})
	if err != nil {
		tb.Fatal(err)
	}
	return &fuzzBundle{handler: a.Handler, pool: pool}
}

// fuzzRows are the rows an answer may write.
type fuzzRows struct{ claims, jobs, audit, denied int }

func (b *fuzzBundle) rows(t *testing.T) fuzzRows {
	t.Helper()
	var r fuzzRows
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM idempotency_claims),
		(SELECT count(*) FROM river_job),
		(SELECT count(*) FROM audit_events),
		(SELECT count(*) FROM audit_events WHERE decision = 'denied')`).Scan(&r.claims, &r.jobs, &r.audit, &r.denied)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// serve runs one request through the handler and decodes its JSON answer.
func (b *fuzzBundle) serve(t *testing.T, req *http.Request) (int, map[string]any, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return decodeAnswer(t, req, rec)
}

// decodeAnswer checks and decodes an answer: never 5xx, always a JSON
// object, and problem+json with our code for errors.
func decodeAnswer(t *testing.T, req *http.Request, rec *httptest.ResponseRecorder) (int, map[string]any, string) {
	t.Helper()
	body := rec.Body.String()
	if rec.Code >= 500 {
		t.Fatalf("%s %s answered %d: %s", req.Method, req.URL, rec.Code, body)
	}
	ct := rec.Header().Get("Content-Type")
	if ct != "application/json" && ct != "application/problem+json" {
		t.Fatalf("%s %s answered %d with Content-Type %q: %s", req.Method, req.URL, rec.Code, ct, body)
	}
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s answered %d with a body that is not a JSON object: %v: %s", req.Method, req.URL, rec.Code, err, body)
	}
	if ct == "application/problem+json" {
		e, _ := out["error"].(map[string]any)
		if code, _ := e["code"].(string); code == "" {
			t.Fatalf("%s %s answered %d without an error code: %s", req.Method, req.URL, rec.Code, body)
		}
	}
	return rec.Code, out, body
}

// checkRows checks what an answer wrote since before.
func (b *fuzzBundle) checkRows(t *testing.T, before fuzzRows, status int, out map[string]any, body string) {
	t.Helper()
	after := b.rows(t)
	got := fuzzRows{after.claims - before.claims, after.jobs - before.jobs, after.audit - before.audit, after.denied - before.denied}
	var want fuzzRows
	switch outcome, _ := out["outcome"].(string); {
	case status == http.StatusBadRequest || status == http.StatusForbidden:
		want = fuzzRows{audit: 1, denied: 1}
	case status == http.StatusConflict && strings.Contains(body, `"code":"possible_duplicate"`):
		// The same arguments as a recent operation under a fresh key:
		// refused, nothing claimed.
		want = fuzzRows{audit: 1, denied: 1}
	case status == http.StatusUnauthorized || status == http.StatusNotFound || status == http.StatusRequestEntityTooLarge:
	case outcome == "accepted":
		want = fuzzRows{claims: 1, jobs: 1, audit: 1}
	case outcome == "in_flight" || outcome == "replayed" || status == http.StatusUnprocessableEntity:
		want = fuzzRows{audit: 1}
	case status == http.StatusOK: // a read
	default:
		t.Fatalf("unexpected answer %d: %s", status, body)
	}
	if got != want {
		t.Fatalf("answer %d wrote %+v rows, want %+v: %s", status, got, want, body)
	}
}

func pick[T any](list []T, i uint8) T { return list[int(i)%len(list)] }

// restToolSeed is one input of FuzzRESTTool's corpus: the tool's and the
// token's index, the Idempotency-Key header (when hasKey) and the body.
type restToolSeed struct {
	tool, token uint8
	hasKey      bool
	key, body   string
}

// restToolSeeds is FuzzRESTTool's corpus.
func restToolSeeds() []restToolSeed {
	refund := `{"order_id":"ord_9f2","amount_cents":1500}`
	return []restToolSeed{
		{0, 0, true, "fuzz-key-00001", refund},
		{0, 0, true, "fuzz-key-00001", refund},                                       // in flight
		{0, 0, true, "fuzz-key-00001", `{"order_id":"ord_9f2","amount_cents":1600}`}, // conflict
		{0, 0, true, `"fuzz-key-00002"`, refund},
		{0, 0, false, "", refund},
		{0, 0, true, "", refund},
		{0, 0, true, "bad key!", refund},
		{0, 0, true, "ключ-возврата-1", refund},
		{0, 0, true, "fuzz\x00key-0003", refund},
		{0, 0, true, `"fuzz-key-0004";a=1`, refund},
		{0, 0, true, "fuzz-key-00005", `{"order_id":"ord_9f2","amount_cents":1500,"reason":"a\u0000b"}`},
		{0, 0, true, "fuzz-key-00006", `{"order_id":"ord_9f2","amount_cents":1500,"\u0000":1}`},
		{0, 0, true, "fuzz-key-00007", `{"order_id":"ord_9f2","amount_cents":1500,"idempotency_key":"other-key-0001"}`},
		{0, 0, true, "fuzz-key-00008", `{"order_id":"ord_9f2","order_id":"ord_9f2","amount_cents":1}`},
		{0, 0, true, "fuzz-key-00009", `{"order_id":"ord_9f2","amount_cents":1e400}`},
		{0, 0, true, "fuzz-key-00010", `{"order_id":"ord_9f2","amount_cents":9007199254740993}`},
		{0, 0, true, "fuzz-key-00011", `{"order_id":"ord_9f2","amount_cents":-0.0}`},
		{0, 0, true, "fuzz-key-00012", `{"order_id":"ord_9f2","amount_cents":15.5}`},
		{0, 0, true, "fuzz-key-00013", `{"order_id":"ord_9f2","amount_cents":1500,"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`},
		{0, 0, true, "fuzz-key-00014", "{\"order_id\":\"ord_9f2\",\"amount_cents\":1500,\"reason\":\"\xff\"}"},
		{0, 0, true, "fuzz-key-00015", `{"order_id":"ord_9f2","amount_cents":1500,"reason":"\ud800"}`},
		{0, 0, true, "fuzz-key-00016", `[]`},
		{0, 0, true, "fuzz-key-00017", `null`},
		{0, 0, true, "fuzz-key-00018", ``},
		{0, 0, true, "fuzz-key-00019", refund + `{}`},
		{1, 0, true, "fuzz-key-00020", `{"customer_id":"cus_1","amount_cents":250,"currency":"usd","memo":"hi"}`},
		{1, 0, true, "fuzz-key-00021", `{"customer_id":"cus_1","amount_cents":250,"currency":"USD"}`},
		{2, 0, true, "fuzz-key-00022", `{"seat_id":"seat_1"}`},
		{3, 0, true, "fuzz-key-00023", `{"user_id":"usr 1"}`},
		{4, 0, false, "", `{"tool":"refund_order","idempotency_key":"fuzz-key-00001"}`},
		{4, 0, false, "", `{"tool":"refund_order","idempotency_key":"nope"}`},
		{5, 0, false, "", `{"order_id":"ord_9f2"}`},
		{5, 0, false, "", `{"order_id":"ord_404"}`},
		{0, 1, true, "fuzz-key-00024", refund},
		{0, 2, true, "fuzz-key-00025", refund},
		{0, 3, true, "fuzz-key-00026", refund},
		{6, 0, true, "fuzz-key-00027", refund},
	}
}

func FuzzRESTTool(f *testing.F) {
	b := fuzzSetup(f)
	for _, s := range restToolSeeds() {
		f.Add(s.tool, s.token, s.hasKey, s.key, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, tool, token uint8, hasKey bool, key string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/tools/"+pick(fuzzTools, tool), bytes.NewReader(body))
		if tok := pick(fuzzTokens, token); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if hasKey {
			req.Header["Idempotency-Key"] = []string{key}
		}
		before := b.rows(t)
		status, out, raw := b.serve(t, req)
		b.checkRows(t, before, status, out, raw)
	})
}

func FuzzRESTOperation(f *testing.F) {
	b := fuzzSetup(f)
	// One operation to find.
	req := httptest.NewRequest(http.MethodPost, "/v1/tools/refund_order", strings.NewReader(`{"order_id":"ord_9f2","amount_cents":100}`))
	req.Header.Set("Authorization", "Bearer "+fuzzTokenAll)
	req.Header.Set("Idempotency-Key", "fuzz-op-key-001")
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted {
		f.Fatalf("seeding an operation: %d %s", rec.Code, rec.Body)
	}
	for _, s := range []struct {
		tool, key string
		token     uint8
	}{
		{"refund_order", "fuzz-op-key-001", 0},
		{"refund_order", "fuzz-op-key-001", 1},
		{"refund_order", "fuzz-op-key-001", 2},
		{"refund_order", "fuzz-op-key-404", 0},
		{"refund_order", "short", 0},
		{"refund_order", "fuzz/op/key/01", 0},
		{"refund_order", "fuzz\x00op-key-01", 0},
		{"get_order", "fuzz-op-key-001", 0},
		{"", "fuzz-op-key-001", 0},
		{"refund_order", strings.Repeat("k", 200), 0},
	} {
		f.Add(s.tool, s.key, s.token)
	}
	f.Fuzz(func(t *testing.T, tool, key string, token uint8) {
		if tool == "" || key == "" {
			return // not this route
		}
		req := httptest.NewRequest(http.MethodGet, "/v1/operations/"+url.PathEscape(tool)+"/"+url.PathEscape(key), nil)
		if tok := pick(fuzzTokens, token); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		before := b.rows(t)
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		if rec.Code == http.StatusNotFound && rec.Header().Get("Content-Type") != "application/problem+json" {
			// The router's own 404: the escaped path did not match the
			// route (a segment decoded to "/" or "."). No handler ran.
			if got := b.rows(t); got != before {
				t.Fatalf("router 404 wrote rows: %+v -> %+v", before, got)
			}
			return
		}
		status, out, raw := decodeAnswer(t, req, rec)
		b.checkRows(t, before, status, out, raw)
	})
}

// mcpToolCallSeeds are FuzzMCPToolCall's corpus: the tool's index and the
// raw arguments.
var mcpToolCallSeeds = []struct {
	tool uint8
	args string
}{
	{0, `{"order_id":"ord_9f2","amount_cents":1500,"idempotency_key":"fuzz-mcp-0001"}`},
	{0, `{"order_id":"ord_9f2","amount_cents":1500,"idempotency_key":"fuzz-mcp-0001"}`},
	{0, `{"order_id":"ord_9f2","amount_cents":1501,"idempotency_key":"fuzz-mcp-0001"}`},
	{0, `{"order_id":"ord_9f2","amount_cents":1500}`},
	{0, `{"order_id":"ord_9f2","amount_cents":1500,"idempotency_key":"fuzz\u0000mcp-02"}`},
	{0, `{"order_id":"ord_9f2","amount_cents":1500,"reason":"\u0000","idempotency_key":"fuzz-mcp-0003"}`},
	{0, `{"order_id":"ord_9f2","amount_cents":1500,"idempotency_key":"` + strings.Repeat("€", 128) + `"}`},
	{0, `{"order_id":"ord_9f2","order_id":"x","amount_cents":1500,"idempotency_key":"fuzz-mcp-0004"}`},
	{0, `{"order_id":"ord_9f2","amount_cents":1e400,"idempotency_key":"fuzz-mcp-0005"}`},
	{0, `[]`},
	{0, `null`},
	{0, `"x"`},
	{0, `{`},
	{1, `{"customer_id":"cus_1","amount_cents":1,"currency":"usd","idempotency_key":"fuzz-mcp-0006"}`},
	{2, `{"seat_id":"seat_1","idempotency_key":"fuzz-mcp-0007","tenant_id":"globex"}`},
	{3, `{"user_id":"usr_1","idempotency_key":"fuzz-mcp-0008"}`},
	{4, `{"tool":"refund_order","idempotency_key":"fuzz-mcp-0001"}`},
	{5, `{"order_id":"ord_9f2"}`},
	{6, `{}`},
}

// FuzzMCPToolCall sends tools/call with fuzzed raw arguments. Whatever the
// MCP SDK's transport refuses itself (malformed JSON-RPC) writes nothing;
// whatever reaches our handler is a result or a tool error with our code,
// with the rows that answer implies.
func FuzzMCPToolCall(f *testing.F) {
	b := fuzzSetup(f)
	for _, s := range mcpToolCallSeeds {
		f.Add(s.tool, []byte(s.args))
	}
	f.Fuzz(func(t *testing.T, tool uint8, args []byte) {
		name, _ := json.Marshal(pick(fuzzTools, tool))
		msg := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":` + string(name) + `,"arguments":` + string(args) + `}}`
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(msg))
		req.Header.Set("Authorization", "Bearer "+fuzzTokenAll)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		before := b.rows(t)
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("answered %d: %s", rec.Code, rec.Body)
		}
		var resp struct {
			Result *struct {
				IsError           bool           `json:"isError"`
				StructuredContent map[string]any `json:"structuredContent"`
			} `json:"result"`
			Error *struct{ Code int } `json:"error"`
		}
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &resp) != nil || resp.Result == nil {
			// Refused by the transport or the JSON-RPC layer, or an
			// unknown tool: our handler did not run.
			if got := b.rows(t); got != before {
				t.Fatalf("a refusal before the tool wrote rows: %+v -> %+v: %s", before, got, rec.Body)
			}
			return
		}
		out := resp.Result.StructuredContent
		status := http.StatusOK
		if resp.Result.IsError {
			e, _ := out["error"].(map[string]any)
			code, _ := e["code"].(string)
			switch {
			case slices.Contains([]string{"invalid_argument", "idempotency_key_required", "invalid_idempotency_key", "forbidden"}, code):
				status = http.StatusBadRequest
			case code == "idempotency_key_reuse_with_different_args":
				status = http.StatusUnprocessableEntity
			case code == "not_found":
				status = http.StatusNotFound
			default:
				t.Fatalf("tool error with code %q: %s", code, rec.Body)
			}
		}
		b.checkRows(t, before, status, out, rec.Body.String())
	})
}
