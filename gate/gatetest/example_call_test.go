package gatetest_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
)

// A retried call is one coupon: the second call with the same key is
// answered from the first outcome, and a call with the same key but other
// arguments is a conflict. In a test, pass the test's *testing.T; this
// runnable example brings its own (exampleT) because examples get none.
func ExampleHarness_Call() {
	t := newExampleT()
	defer t.finish()

	reg := gate.NewRegistry().MustAdd(issueCoupon)
	h := gatetest.SQLite(t, reg, &gatetest.Options{Migrations: couponMigrations})

	first := h.Call(t, "issue_coupon", "coupon-0001", map[string]any{"customer_id": "cus_1", "percent_off": 10})
	op := h.Await(t, "issue_coupon", "coupon-0001")
	again := h.Call(t, "issue_coupon", "coupon-0001", map[string]any{"customer_id": "cus_1", "percent_off": 10})
	other := h.Call(t, "issue_coupon", "coupon-0001", map[string]any{"customer_id": "cus_1", "percent_off": 20})

	fmt.Println("first:", first.Outcome)
	fmt.Println("retried:", again.Outcome, again.Replayed, again.Operation.Status)
	fmt.Println("other arguments:", other.Status, other.Error.Code)
	fmt.Println("coupons:", h.Count(t, `SELECT count(*) FROM coupons WHERE operation_id = $1`, op.OperationID))
	// Output:
	// first: accepted
	// retried: replayed true succeeded
	// other arguments: 422 idempotency_key_reuse_with_different_args
	// coupons: 1
}

// exampleT is the part of testing.TB a harness uses, for a runnable
// example: failures panic, cleanups run at finish.
type exampleT struct {
	testing.TB
	ctx      context.Context
	cancel   context.CancelFunc
	cleanups []func()
	dirs     []string
}

func newExampleT() *exampleT {
	ctx, cancel := context.WithCancel(context.Background())
	return &exampleT{ctx: ctx, cancel: cancel}
}

func (t *exampleT) finish() {
	t.cancel()
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	for _, d := range t.dirs {
		_ = os.RemoveAll(d)
	}
}

func (t *exampleT) Helper()                           {}
func (t *exampleT) Name() string                      { return "ExampleHarness_Call" }
func (t *exampleT) Context() context.Context          { return t.ctx }
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Failed() bool                      { return false }
func (t *exampleT) Log(args ...any)                   {}
func (t *exampleT) Logf(format string, args ...any)   {}
func (t *exampleT) Error(args ...any)                 { panic(fmt.Sprint(args...)) }
func (t *exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) FailNow()                          { panic("FailNow") }
func (t *exampleT) TempDir() string {
	d, err := os.MkdirTemp("", "gatetest-example-")
	if err != nil {
		panic(err)
	}
	t.dirs = append(t.dirs, d)
	return d
}
