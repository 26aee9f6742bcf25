package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/vocab"
)

// docAnswer is a JSON example of docs/errors.md, after its
// "<!-- answer: name -->" marker.
var docAnswer = regexp.MustCompile("(?s)<!-- answer: ([a-z-]+) -->\n```json\n(.*?)\n```")

// docAnswers returns the doc's JSON examples by name.
func docAnswers(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/errors.md")
	require.NoError(t, err)
	out := map[string]string{}
	for _, m := range docAnswer.FindAllStringSubmatch(string(raw), -1) {
		require.NotContains(t, out, m[1], "two examples named %s", m[1])
		require.True(t, json.Valid([]byte(m[2])), "the example %s is not JSON", m[1])
		out[m[1]] = m[2]
	}
	return out
}

// shape is a JSON value's skeleton: objects keep their members' names,
// strings, numbers and booleans become their type, and the members that
// say which answer it is keep their value.
func shape(v any, member string) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = shape(e, k)
		}
		return out
	case []any:
		out := []any{}
		for _, e := range v {
			out = append(out, shape(e, member))
		}
		return out
	case string:
		switch member {
		case "outcome", "status", "code", "title", "tool", "type", "idempotency_key":
			return v
		}
		return "string"
	case float64:
		if member == "status" {
			return v
		}
		return "number"
	case bool:
		return v
	}
	return v
}

func shapeOf(t *testing.T, body string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	return shape(v, "")
}

// members returns the names of a JSON object's top-level members, sorted.
func members(t *testing.T, body string) []string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// operationMembers are the JSON names of an operation's members.
func operationMembers() []string {
	var names []string
	typ := reflect.TypeFor[domain.Operation]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

// A mutation answers the envelope, a read of its operation (the GET its
// Location names, and get_operation's REST twin) the bare operation: the
// two shapes docs/errors.md shows, member by member, success and error.
func TestAnswerShapesAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	b := fuzzSetup(t)
	doc := docAnswers(t)
	do := func(method, path, body string, header ...string) (int, http.Header, string) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+fuzzTokenAll)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		return rec.Code, rec.Header(), rec.Body.String()
	}
	documented := func(name, body string) {
		t.Helper()
		require.Contains(t, doc, name, "docs/errors.md has no example %s", name)
		require.Equal(t, shapeOf(t, doc[name]), shapeOf(t, body), "the example %s is not the answer:\n%s", name, body)
	}
	// read answers GET /v1/operations/{tool}/{key} and checks that
	// POST /v1/tools/get_operation answers the same bytes.
	read := func(tool, key string) (int, http.Header, string) {
		t.Helper()
		status, header, got := do(http.MethodGet, "/v1/operations/"+tool+"/"+key, "")
		postStatus, postHeader, post := do(http.MethodPost, "/v1/tools/get_operation", `{"tool":"`+tool+`","idempotency_key":"`+key+`"}`)
		require.Equal(t, status, postStatus, post)
		require.Equal(t, header.Get("Content-Type"), postHeader.Get("Content-Type"))
		if status == http.StatusOK {
			// next_attempt_at of a job due now is the time of the read.
			require.Equal(t, nextAttempt.ReplaceAllString(got, "$1"), nextAttempt.ReplaceAllString(post, "$1"), "the GET and its REST twin answer the same")
		}
		return status, header, got
	}
	isOperation := func(body string) {
		t.Helper()
		require.Subset(t, operationMembers(), members(t, body), "the top-level members are the operation's")
		for _, m := range []string{"operation_id", "tool", "idempotency_key", "status", "attempts", "generation", "created_at", "updated_at"} {
			require.Contains(t, members(t, body), m)
		}
	}
	ctx := context.Background()
	st := pgengine.New(b.pool)
	lease := func(tool, key string) *core.Claim {
		t.Helper()
		c, err := st.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: tool, IdempotencyKey: key})
		require.NoError(t, err)
		c, err = st.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
		require.NoError(t, err)
		return c
	}
	const credit = `{"customer_id":"cus_1","amount_cents":250,"currency":"usd"}`

	status, header, body := do(http.MethodPost, "/v1/tools/apply_credit", credit, "Idempotency-Key", "credit-cus_1-0001")
	require.Equal(t, http.StatusAccepted, status, body)
	require.Equal(t, "/v1/operations/apply_credit/credit-cus_1-0001", header.Get("Location"))
	require.Equal(t, []string{"operation", "outcome", "replayed", "retry_after_ms"}, members(t, body))
	documented("mutation-accepted", body)

	status, header, body = read("apply_credit", "credit-cus_1-0001")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "application/json", header.Get("Content-Type"))
	isOperation(body)
	documented("operation-queued", body)

	c := lease("apply_credit", "credit-cus_1-0001")
	_, err := st.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: c.Epoch, Result: json.RawMessage(`{"balance_cents":250}`)})
	require.NoError(t, err)

	status, header, body = do(http.MethodPost, "/v1/tools/apply_credit", credit, "Idempotency-Key", "credit-cus_1-0001")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "true", header.Get("Idempotent-Replayed"))
	documented("mutation-replayed", body)
	var envelope struct {
		Operation json.RawMessage `json:"operation"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &envelope))

	status, _, body = read("apply_credit", "credit-cus_1-0001")
	require.Equal(t, http.StatusOK, status, body)
	isOperation(body)
	require.Equal(t, members(t, string(envelope.Operation)), members(t, body), "the GET's members are those of the envelope's operation")
	require.JSONEq(t, string(envelope.Operation), body, "and so are their values")
	documented("operation-succeeded", body)

	status, _, body = do(http.MethodPost, "/v1/tools/refund_order", `{"order_id":"ord_9f2","amount_cents":100}`, "Idempotency-Key", "refund-ord_9f2-0001")
	require.Equal(t, http.StatusAccepted, status, body)
	c = lease("refund_order", "refund-ord_9f2-0001")
	_, err = st.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: vocab.ErrorInfo{Code: "card_declined", Message: "Your card was declined."}})
	require.NoError(t, err)
	status, _, body = read("refund_order", "refund-ord_9f2-0001")
	require.Equal(t, http.StatusOK, status, "reading a failed operation succeeds: %s", body)
	isOperation(body)
	documented("operation-failed", body)

	status, header, body = read("apply_credit", "no-such-key-0001")
	require.Equal(t, http.StatusNotFound, status, body)
	require.Equal(t, "application/problem+json", header.Get("Content-Type"))
	documented("operation-not-found", body)
	require.Contains(t, body, `"instance":"/v1/operations/apply_credit/no-such-key-0001"`)
}
