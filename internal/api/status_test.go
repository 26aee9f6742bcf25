package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/domain"
)

// wantStatus is the REST status of every domain code, written out apart
// from codeStatus so that a change to either shows here.
var wantStatus = map[domain.Code]int{
	domain.CodeUnauthenticated:               401,
	domain.CodeForbidden:                     403,
	domain.CodeIdempotencyKeyRequired:        400,
	domain.CodeInvalidIdempotencyKey:         400,
	domain.CodeInvalidArgument:               400,
	domain.CodeKeyReuseDifferentArgs:         422,
	domain.CodeKeyExpired:                    422,
	domain.CodeNotFound:                      404,
	domain.CodeRateLimited:                   429,
	domain.CodeUnavailable:                   503,
	domain.CodeInternal:                      500,
	domain.CodeResetTokenUsed:                410,
	domain.CodeResetTokenExpired:             410,
	domain.CodeCardDeclined:                  402,
	domain.CodeAmountExceedsRefundable:       422,
	domain.CodeDownstreamRejected:            422,
	domain.CodeDownstreamIdempotencyMismatch: 422,
	domain.CodeCancelled:                     422,
	domain.CodeApprovalDenied:                422,
	domain.CodeApprovalExpired:               422,
	domain.CodeOutcomeUnknown:                502,
	domain.CodeRetriesExhausted:              502,
}

func TestStatusOfEveryCode(t *testing.T) {
	require.Len(t, wantStatus, len(domain.Codes()), "wantStatus lists every code once")
	op := &domain.Operation{OperationID: "op_1", Status: domain.StatusFailed}
	for _, code := range domain.Codes() {
		t.Run(string(code), func(t *testing.T) {
			want, ok := wantStatus[code]
			require.True(t, ok, "no expected status for %s", code)
			_, listed := codeStatus[code]
			require.True(t, listed, "%s is missing from codeStatus", code)
			err := &domain.Error{Code: code, Message: "m"}
			// A refusal, a fresh stored failure and a replayed one answer
			// the same status.
			require.Equal(t, want, statusOf(&callError{err: err}), "refusal")
			require.Equal(t, want, statusOf(&callError{err: err, operation: op}), "stored")
			require.Equal(t, want, statusOf(&callError{err: err, operation: op, replayed: true}), "replayed")
		})
	}
}

func TestStatusOfToolCodes(t *testing.T) {
	op := &domain.Operation{OperationID: "op_1", Status: domain.StatusFailed}
	for code, want := range map[domain.Code]int{
		codeDownstreamAuth:   http.StatusBadGateway,
		codeMailRejected:     http.StatusUnprocessableEntity,
		"coupon_exhausted":   http.StatusUnprocessableEntity, // a team's own code: the default
		"quota_would_exceed": defaultStatus,
	} {
		require.Equal(t, want, statusOf(&callError{err: &domain.Error{Code: code}, operation: op, replayed: true}), code)
	}
	require.Equal(t, http.StatusUnprocessableEntity, defaultStatus)
}

// A stored failure is never answered as a success: every outcome code is
// a 4xx or a 5xx.
func TestStoredFailuresAreErrorStatuses(t *testing.T) {
	for code, status := range codeStatus {
		require.GreaterOrEqual(t, status, 400, code)
		require.NotEqual(t, http.StatusConflict, status, "%s: 409 means in flight on this api", code)
	}
}

func TestWriteProblemCarriesTheStatusAndOperation(t *testing.T) {
	op := &domain.Operation{OperationID: "op_1", Tool: "refund_order", IdempotencyKey: "key-00000001", Status: domain.StatusFailed,
		Error: &domain.ErrorInfo{Code: domain.CodeAmountExceedsRefundable, Message: "too much"}}
	cerr := &callError{err: &domain.Error{Code: domain.CodeAmountExceedsRefundable, Message: "too much"}, operation: op, replayed: true}
	rec := httptest.NewRecorder()
	writeProblem(rec, httptest.NewRequest(http.MethodPost, "/v1/tools/refund_order", nil), statusOf(cerr), cerr)

	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var body struct {
		Type      string            `json:"type"`
		Title     string            `json:"title"`
		Status    int               `json:"status"`
		Instance  string            `json:"instance"`
		Replayed  bool              `json:"replayed"`
		Operation *domain.Operation `json:"operation"`
		Error     struct {
			Code domain.Code `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, "https://idemgate.dev/errors/amount_exceeds_refundable", body.Type)
	require.Equal(t, "amount_exceeds_refundable", body.Title)
	require.Equal(t, rec.Code, body.Status, "the body's status is the answer's")
	require.Equal(t, "/v1/tools/refund_order", body.Instance)
	require.True(t, body.Replayed)
	require.Equal(t, domain.CodeAmountExceedsRefundable, body.Error.Code)
	require.NotNil(t, body.Operation)
	require.Equal(t, "op_1", body.Operation.OperationID)
}
