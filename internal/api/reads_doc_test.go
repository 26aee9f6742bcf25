package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// toolsList is the tools of tools/list, as an MCP client sees them.
func toolsList(t *testing.T) map[string]map[string]any {
	t.Helper()
	p := mcpPairSetup(t)
	list := resultOf(t, p.send(t, p.sdk, mcpRequest{header: legacy, body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`}))
	out := map[string]map[string]any{}
	for _, tl := range list["tools"].([]any) {
		tm := tl.(map[string]any)
		out[tm["name"].(string)] = tm
	}
	return out
}

// Every argument of every published inputSchema, the built-in reads' and
// the tools', has a description: an agent reads nothing else.
func TestPublishedSchemasDescribeEveryProperty(t *testing.T) {
	t.Parallel()
	tools := toolsList(t)
	require.Contains(t, tools, "get_operation")
	require.Contains(t, tools, "list_operations")
	for name, tm := range tools {
		props := tm["inputSchema"].(map[string]any)["properties"].(map[string]any)
		require.NotEmpty(t, props, name)
		for prop, schema := range props {
			d, _ := schema.(map[string]any)["description"].(string)
			require.NotEmpty(t, strings.TrimSpace(d), "%s's argument %s has no description", name, prop)
		}
	}
}

// docArgRow is a row of an argument table in docs/tools.md: the argument,
// its type, whether it is required, and its meaning.
var docArgRow = regexp.MustCompile("^\\| `([a-z_]+)` \\| (.+?) \\| (yes|no) \\| (.+?) \\|$")

// docArguments returns the argument table of the doc's section on tool:
// each argument's required cell and meaning.
func docArguments(t *testing.T, doc, tool string) map[string][2]string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n### `"+tool+"`\n")
	require.True(t, ok, "docs/tools.md has no section ### `%s`", tool)
	section, _, _ = strings.Cut(section, "\n#")
	out := map[string][2]string{}
	for _, line := range strings.Split(section, "\n") {
		if m := docArgRow.FindStringSubmatch(line); m != nil {
			out[m[1]] = [2]string{m[3], m[4]}
		}
	}
	return out
}

// docs/tools.md documents each argument of get_operation and
// list_operations as published: the same names, required the same way,
// and the published description as its meaning.
func TestBuiltinReadsDocumentedAsPublished(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/tools.md")
	require.NoError(t, err)
	tools := toolsList(t)
	for _, name := range []string{"get_operation", "list_operations"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			schema := tools[name]["inputSchema"].(map[string]any)
			required := map[string]bool{}
			list, _ := schema["required"].([]any)
			for _, r := range list {
				required[r.(string)] = true
			}
			documented := docArguments(t, string(raw), name)
			props := schema["properties"].(map[string]any)
			require.Len(t, documented, len(props), "documented %v, published %v", documented, props)
			for prop, s := range props {
				row, ok := documented[prop]
				require.True(t, ok, "%s's argument %s is not documented", name, prop)
				require.Equal(t, map[bool]string{true: "yes", false: "no"}[required[prop]], row[0], "%s.%s required", name, prop)
				require.Equal(t, s.(map[string]any)["description"], strings.ReplaceAll(row[1], "`", ""), "%s.%s: the doc's meaning is the published description", name, prop)
			}
		})
	}
}

// The errors docs/tools.md lists for get_operation and list_operations,
// each from the call that makes it, on REST.
func TestBuiltinReadsErrors(t *testing.T) {
	t.Parallel()
	b := fuzzSetup(t)
	for _, tc := range []struct {
		name, token, method, path, body string
		status                          int
		code, field                     string
	}{
		{"GetToolNotAMutation", fuzzTokenAll, http.MethodPost, "/v1/tools/get_operation", `{"tool":"get_order","idempotency_key":"credit-cus_1-0001"}`, 400, "invalid_argument", "tool"},
		{"GetToolMissing", fuzzTokenAll, http.MethodPost, "/v1/tools/get_operation", `{"idempotency_key":"credit-cus_1-0001"}`, 400, "invalid_argument", "tool"},
		{"GetKeyMissing", fuzzTokenAll, http.MethodPost, "/v1/tools/get_operation", `{"tool":"apply_credit"}`, 400, "idempotency_key_required", "idempotency_key"},
		{"GetUnknownArgument", fuzzTokenAll, http.MethodPost, "/v1/tools/get_operation", `{"tool":"apply_credit","idempotency_key":"credit-cus_1-0001","x":1}`, 400, "invalid_argument", "x"},
		{"GetKeyEmpty", fuzzTokenAll, http.MethodPost, "/v1/tools/get_operation", `{"tool":"apply_credit","idempotency_key":""}`, 400, "idempotency_key_required", "idempotency_key"},
		{"GetKeyShort", fuzzTokenAll, http.MethodGet, "/v1/operations/apply_credit/short", "", 400, "invalid_idempotency_key", "idempotency_key"},
		{"GetKeyCharacters", fuzzTokenAll, http.MethodPost, "/v1/tools/get_operation", `{"tool":"apply_credit","idempotency_key":"credit cus_1 0001"}`, 400, "invalid_idempotency_key", "idempotency_key"},
		{"GetNotFound", fuzzTokenAll, http.MethodGet, "/v1/operations/apply_credit/credit-cus_1-0001", "", 404, "not_found", "idempotency_key"},
		{"ListToolNotAMutation", fuzzTokenAll, http.MethodGet, "/v1/operations?tool=get_order", "", 400, "invalid_argument", "tool"},
		{"ListStatus", fuzzTokenAll, http.MethodGet, "/v1/operations?status=done", "", 400, "invalid_argument", "status"},
		{"ListLimitZero", fuzzTokenAll, http.MethodGet, "/v1/operations?limit=0", "", 400, "invalid_argument", "limit"},
		{"ListLimitTooLarge", fuzzTokenAll, http.MethodPost, "/v1/tools/list_operations", `{"limit":101}`, 400, "invalid_argument", "limit"},
		{"ListLimitNotInteger", fuzzTokenAll, http.MethodGet, "/v1/operations?limit=ten", "", 400, "invalid_argument", "limit"},
		{"ListCursor", fuzzTokenAll, http.MethodGet, "/v1/operations?cursor=bm90LWEtY3Vyc29y", "", 400, "invalid_argument", "cursor"},
		{"ListUnknownArgument", fuzzTokenAll, http.MethodPost, "/v1/tools/list_operations", `{"page":2}`, 400, "invalid_argument", "page"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+tc.token)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			b.handler.ServeHTTP(rec, req)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			var body struct {
				Error struct {
					Code  string `json:"code"`
					Field string `json:"field"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			require.Equal(t, tc.code, body.Error.Code, rec.Body.String())
			require.Equal(t, tc.field, body.Error.Field, rec.Body.String())
		})
	}
}
