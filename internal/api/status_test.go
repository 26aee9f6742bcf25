package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

// wantStatus is the REST status of every domain code, written out apart
// from codeStatus so that a change to either shows here.
var wantStatus = map[vocab.Code]int{
	vocab.CodeUnauthenticated:               401,
	vocab.CodeForbidden:                     403,
	vocab.CodeIdempotencyKeyRequired:        400,
	vocab.CodeInvalidIdempotencyKey:         400,
	vocab.CodeInvalidArgument:               400,
	vocab.CodeKeyReuseDifferentArgs:         422,
	vocab.CodeKeyExpired:                    422,
	vocab.CodeNotFound:                      404,
	vocab.CodeRateLimited:                   429,
	vocab.CodeApprovalsPendingLimit:         429,
	vocab.CodePossibleDuplicate:             409,
	vocab.CodeUnavailable:                   503,
	vocab.CodeInternal:                      500,
	vocab.CodeResetTokenUsed:                410,
	vocab.CodeResetTokenExpired:             410,
	vocab.CodeCardDeclined:                  402,
	vocab.CodeAmountExceedsRefundable:       422,
	vocab.CodeDownstreamRejected:            422,
	vocab.CodeDownstreamIdempotencyMismatch: 422,
	vocab.CodeCancelled:                     422,
	vocab.CodeApprovalDenied:                422,
	vocab.CodeApprovalExpired:               422,
	vocab.CodeApprovalAlreadyDecided:        422,
	vocab.CodeOutcomeUnknown:                502,
	vocab.CodeRetriesExhausted:              502,
	vocab.CodeJobCancelledByOperator:        502,
	vocab.CodeJobVanished:                   502,
}

func TestStatusOfEveryCode(t *testing.T) {
	require.Len(t, wantStatus, len(vocab.Codes()), "wantStatus lists every code once")
	op := &vocab.Operation{OperationID: "op_1", Status: vocab.StatusFailed}
	for _, code := range vocab.Codes() {
		t.Run(string(code), func(t *testing.T) {
			want, ok := wantStatus[code]
			require.True(t, ok, "no expected status for %s", code)
			_, listed := codeStatus[code]
			require.True(t, listed, "%s is missing from codeStatus", code)
			err := &vocab.Error{Code: code, Message: "m"}
			// A refusal, a fresh stored failure and a replayed one answer
			// the same status.
			require.Equal(t, want, statusOf(&callError{err: err}), "refusal")
			require.Equal(t, want, statusOf(&callError{err: err, operation: op}), "stored")
			require.Equal(t, want, statusOf(&callError{err: err, operation: op, replayed: true}), "replayed")
		})
	}
}

func TestStatusOfToolCodes(t *testing.T) {
	op := &vocab.Operation{OperationID: "op_1", Status: vocab.StatusFailed}
	for code, want := range map[vocab.Code]int{
		codeDownstreamAuth:   http.StatusBadGateway,
		codeMailRejected:     http.StatusUnprocessableEntity,
		"coupon_exhausted":   http.StatusUnprocessableEntity, // a team's own code: the default
		"quota_would_exceed": defaultStatus,
	} {
		require.Equal(t, want, statusOf(&callError{err: &vocab.Error{Code: code}, operation: op, replayed: true}), code)
	}
	require.Equal(t, http.StatusUnprocessableEntity, defaultStatus)
}

// A stored failure is never answered as a success: every outcome code is
// a 4xx or a 5xx.
func TestStoredFailuresAreErrorStatuses(t *testing.T) {
	for code, status := range codeStatus {
		require.GreaterOrEqual(t, status, 400, code)
		if code == vocab.CodePossibleDuplicate {
			continue // a refusal, never stored: 409 names the earlier operation
		}
		require.NotEqual(t, http.StatusConflict, status, "%s: 409 means in flight on this api", code)
	}
}

func TestWriteProblemCarriesTheStatusAndOperation(t *testing.T) {
	op := &vocab.Operation{OperationID: "op_1", Tool: "refund_order", IdempotencyKey: "key-00000001", Status: vocab.StatusFailed,
		Error: &vocab.ErrorInfo{Code: vocab.CodeAmountExceedsRefundable, Message: "too much"}}
	cerr := &callError{err: &vocab.Error{Code: vocab.CodeAmountExceedsRefundable, Message: "too much"}, operation: op, replayed: true}
	rec := httptest.NewRecorder()
	writeProblem(rec, httptest.NewRequest(http.MethodPost, "/v1/tools/refund_order", nil), statusOf(cerr), cerr)

	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var body struct {
		Type      string           `json:"type"`
		Title     string           `json:"title"`
		Status    int              `json:"status"`
		Instance  string           `json:"instance"`
		Replayed  bool             `json:"replayed"`
		Operation *vocab.Operation `json:"operation"`
		Error     struct {
			Code vocab.Code `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, "https://idemgate.dev/errors/amount_exceeds_refundable", body.Type)
	require.Equal(t, "amount_exceeds_refundable", body.Title)
	require.Equal(t, rec.Code, body.Status, "the body's status is the answer's")
	require.Equal(t, "/v1/tools/refund_order", body.Instance)
	require.True(t, body.Replayed)
	require.Equal(t, vocab.CodeAmountExceedsRefundable, body.Error.Code)
	require.NotNil(t, body.Operation)
	require.Equal(t, "op_1", body.Operation.OperationID)
}
