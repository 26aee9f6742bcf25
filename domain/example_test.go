package domain_test

import (
	"encoding/json"
	"fmt"

	"github.com/idemgate/idemgate/domain"
)

// A client reads an operation as the api answers it and branches on its
// status and code, never on messages.
func Example() {
	answer := []byte(`{"operation_id":"op_1","tool":"issue_coupon","idempotency_key":"coupon-7",
		"status":"failed","attempts":1,"generation":0,"created_at":"2026-12-04T10:00:00Z","updated_at":"2026-12-04T10:00:01Z",
		"error":{"code":"cancelled","message":"the owner cancelled the operation before it ran"}}`)
	var op domain.Operation
	if err := json.Unmarshal(answer, &op); err != nil {
		panic(err)
	}
	fmt.Println(op.Status, op.Status.Terminal(), op.Error.Code == domain.CodeCancelled)
	// Output: failed true true
}

// An *Error names its code and the field it is about.
func ExampleError() {
	err := &domain.Error{Code: domain.CodeInvalidArgument, Field: "percent_off", Message: "must be at most 100"}
	fmt.Println(err)
	// Output: invalid_argument: percent_off: must be at most 100
}
