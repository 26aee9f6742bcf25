package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

type couponArgs struct {
	CustomerID string `json:"customer_id" jsonschema:"The customer." idem:"id"`
	PercentOff int64  `json:"percent_off" jsonschema:"Discount in percent." idem:"min=1,max=100"`
	Note       string `json:"note,omitempty" idem:"text"`
}

type coupon struct {
	CouponID   string `json:"coupon_id"`
	PercentOff int64  `json:"percent_off"`
}

func issueCoupon() *gate.Mutation[couponArgs, coupon] {
	return &gate.Mutation[couponArgs, coupon]{
		Name: "issue_coupon", Title: "Issue a coupon", Description: "One coupon per key.", Scope: "coupons:issue",
		Policy: gate.Policy{VolatileFields: []string{"note"}, AuditFields: []string{"customer_id"}},
		InTx: func(_ context.Context, _ gate.Tx, op *gate.Op[couponArgs]) (*coupon, error) {
			return &coupon{CouponID: "cpn_" + op.OperationID, PercentOff: op.Args.PercentOff}, nil
		},
	}
}

func toolspecCaller(tenant string) toolspec.Caller {
	return gate.ToolspecCaller(domain.Caller{TenantID: tenant, UserID: "u1"})
}

func decoded(t *testing.T, raw string) map[string]any {
	t.Helper()
	args, err := core.DecodeArgs([]byte(raw))
	require.NoError(t, err)
	return args
}

func TestSpecDerivesSchemasAndPolicy(t *testing.T) {
	t.Parallel()
	spec, err := gate.SpecOf(issueCoupon())
	require.NoError(t, err)
	require.True(t, spec.Mutating)
	require.True(t, spec.InTx)
	require.Equal(t, "database", spec.Provider)

	var in struct {
		Properties map[string]map[string]any `json:"properties"`
		Required   []string                  `json:"required"`
	}
	require.NoError(t, json.Unmarshal(spec.InputSchema, &in))
	require.ElementsMatch(t, []string{"customer_id", "percent_off", "idempotency_key"}, in.Required)
	require.Equal(t, "integer", in.Properties["percent_off"]["type"])
	require.EqualValues(t, 1, in.Properties["percent_off"]["minimum"])
	require.EqualValues(t, 100, in.Properties["percent_off"]["maximum"])
	require.Equal(t, gate.IDPattern, in.Properties["customer_id"]["pattern"])
	require.Equal(t, "The customer.", in.Properties["customer_id"]["description"])
	require.EqualValues(t, gate.MaxTextLen, in.Properties["note"]["maxLength"])

	var out struct {
		Type  string           `json:"type"`
		AnyOf []map[string]any `json:"anyOf"`
	}
	require.NoError(t, json.Unmarshal(spec.OutputSchema, &out))
	require.Equal(t, "object", out.Type)
	require.Len(t, out.AnyOf, 2, "the answer or a tool error")
	require.Contains(t, string(spec.OutputSchema), `"coupon_id"`)

	require.Equal(t, []string{"coupon_id", "percent_off"}, spec.Policy.ResultFields, "every result member by default")
	require.Equal(t, gate.DefaultTTL, spec.Policy.TTL)
	require.Equal(t, []string{"note"}, spec.Policy.VolatileFields)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	spec, err := gate.SpecOf(issueCoupon())
	require.NoError(t, err)
	for _, tc := range []struct {
		name, raw string
		code      vocab.Code
		field     string
	}{
		{"Valid", `{"customer_id":"cus_1","percent_off":10,"idempotency_key":"coupon-key-01"}`, "", ""},
		{"ValidWithoutKey", `{"customer_id":"cus_1","percent_off":100}`, "", ""},
		{"Unknown", `{"customer_id":"cus_1","percent_off":10,"extra":1}`, vocab.CodeInvalidArgument, "extra"},
		{"Missing", `{"percent_off":10}`, vocab.CodeInvalidArgument, "customer_id"},
		{"TooLow", `{"customer_id":"cus_1","percent_off":0}`, vocab.CodeInvalidArgument, "percent_off"},
		{"TooHigh", `{"customer_id":"cus_1","percent_off":101}`, vocab.CodeInvalidArgument, "percent_off"},
		{"Fraction", `{"customer_id":"cus_1","percent_off":10.5}`, vocab.CodeInvalidArgument, "percent_off"},
		{"FractionBelowFloatPrecision", `{"customer_id":"cus_1","percent_off":99.99999999999999999}`, vocab.CodeInvalidArgument, "percent_off"},
		{"IntegralDecimal", `{"customer_id":"cus_1","percent_off":1.0e1}`, "", ""},
		{"JustOverMax", `{"customer_id":"cus_1","percent_off":100.00000000000000001}`, vocab.CodeInvalidArgument, "percent_off"},
		{"StringNumber", `{"customer_id":"cus_1","percent_off":"10"}`, vocab.CodeInvalidArgument, "percent_off"},
		{"BadID", `{"customer_id":"cus 1","percent_off":10}`, vocab.CodeInvalidArgument, "customer_id"},
		{"TextTooLong", `{"customer_id":"cus_1","percent_off":10,"note":"` + strings.Repeat("x", gate.MaxTextLen+1) + `"}`, vocab.CodeInvalidArgument, "note"},
		{"KeyNotString", `{"customer_id":"cus_1","percent_off":10,"idempotency_key":5}`, vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := spec.Validate(decoded(t, tc.raw))
			if tc.code == "" {
				require.NoError(t, err)
				return
			}
			var derr *vocab.Error
			require.ErrorAs(t, err, &derr)
			require.Equal(t, tc.code, derr.Code)
			require.Equal(t, tc.field, derr.Field)
		})
	}
}

func TestDeclarationErrors(t *testing.T) {
	t.Parallel()
	bad := func(mut func(m *gate.Mutation[couponArgs, coupon])) error {
		m := issueCoupon()
		mut(m)
		_, err := gate.SpecOf(m)
		return err
	}
	require.ErrorContains(t, bad(func(m *gate.Mutation[couponArgs, coupon]) { m.Name = "Issue-Coupon" }), "Name")
	require.ErrorContains(t, bad(func(m *gate.Mutation[couponArgs, coupon]) { m.Scope = "coupons" }), "Scope")
	require.ErrorContains(t, bad(func(m *gate.Mutation[couponArgs, coupon]) { m.InTx = nil }), "set InTx")
	require.ErrorContains(t, bad(func(m *gate.Mutation[couponArgs, coupon]) {
		m.Call = func(context.Context, *gate.Op[couponArgs]) (*coupon, error) { return nil, nil }
	}), "only one")
	require.ErrorContains(t, bad(func(m *gate.Mutation[couponArgs, coupon]) { m.Policy.AuditFields = []string{"nope"} }), `"nope"`)
	require.ErrorContains(t, bad(func(m *gate.Mutation[couponArgs, coupon]) { m.Policy.TTL = 1 }), "TTL")

	type withKey struct {
		Key string `json:"idempotency_key"`
	}
	_, err := gate.SpecOf(&gate.Mutation[withKey, coupon]{Name: "k", Title: "K", Description: "K", Scope: "a:b",
		InTx: func(context.Context, gate.Tx, *gate.Op[withKey]) (*coupon, error) { return nil, nil }})
	require.ErrorContains(t, err, "added by idemgate")

	reg := gate.NewRegistry()
	require.NoError(t, reg.Add(issueCoupon()))
	require.ErrorContains(t, reg.Add(issueCoupon()), "registered twice")
	require.Equal(t, []string{"coupons:issue", "operations:read", "ops:admin"}, gate.ScopesOf(reg))
}

// A team's own mutation: arguments and result as structs, an
// in-transaction effect, one registration line.
func Example() {
	type IssueCouponArgs struct {
		CustomerID string `json:"customer_id" jsonschema:"The customer who gets the coupon." idem:"id"`
		PercentOff int64  `json:"percent_off" jsonschema:"Discount in percent." idem:"min=1,max=100"`
	}
	type Coupon struct {
		CouponID   string `json:"coupon_id"`
		CustomerID string `json:"customer_id"`
		PercentOff int64  `json:"percent_off"`
	}
	issueCoupon := &gate.Mutation[IssueCouponArgs, Coupon]{
		Name:        "issue_coupon",
		Title:       "Issue a coupon",
		Description: "Issue a discount coupon to a customer, once per idempotency_key.",
		Scope:       "coupons:issue",
		Policy:      gate.Policy{AuditFields: []string{"customer_id", "percent_off"}},
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[IssueCouponArgs]) (*Coupon, error) {
			_, err := tx.Exec(ctx, `INSERT INTO coupons (tenant_id, operation_id, customer_id, percent_off) VALUES ($1, $2, $3, $4)`,
				op.TenantID, op.OperationID, op.Args.CustomerID, op.Args.PercentOff)
			if err != nil {
				return nil, err
			}
			return &Coupon{CouponID: op.OperationID, CustomerID: op.Args.CustomerID, PercentOff: op.Args.PercentOff}, nil
		},
	}
	reg := gate.NewRegistry()
	if err := reg.Add(issueCoupon); err != nil {
		panic(err)
	}
	fmt.Println(reg.Add(issueCoupon))
	// Output:
	// tool issue_coupon: registered twice
}

// A mutation's Approval becomes the spec's NeedsApproval, typed: it sees
// the decoded arguments and the caller; its window defaults to the smaller
// of a day and the TTL, and may not pass the TTL or stand without Approval.
func TestApprovalDeclaration(t *testing.T) {
	t.Parallel()
	m := issueCoupon()
	m.Approval = func(_ context.Context, _ gate.Tx, caller domain.Caller, a *couponArgs) (bool, error) {
		return a.PercentOff > 50 && caller.TenantID == "acme", nil
	}
	spec, err := gate.SpecOf(m)
	require.NoError(t, err)
	require.Equal(t, gate.DefaultApprovalWindow, spec.ApprovalWindow)
	for raw, want := range map[string]bool{
		`{"customer_id":"cus_1","percent_off":60}`: true,
		`{"customer_id":"cus_1","percent_off":10}`: false,
	} {
		got, err := spec.NeedsApproval(context.Background(), nil, toolspecCaller("acme"), json.RawMessage(raw))
		require.NoError(t, err)
		require.Equal(t, want, got, raw)
	}
	got, err := spec.NeedsApproval(context.Background(), nil, toolspecCaller("globex"), json.RawMessage(`{"customer_id":"cus_1","percent_off":60}`))
	require.NoError(t, err)
	require.False(t, got)

	m.Policy.TTL = time.Hour
	spec, err = gate.SpecOf(m)
	require.NoError(t, err)
	require.Equal(t, time.Hour, spec.ApprovalWindow, "never past the TTL")

	m.Policy.ApprovalWindow = 2 * time.Hour
	_, err = gate.SpecOf(m)
	require.ErrorContains(t, err, "Policy.ApprovalWindow")

	plain := issueCoupon()
	plain.Policy.ApprovalWindow = time.Minute
	_, err = gate.SpecOf(plain)
	require.ErrorContains(t, err, "Approval is not")
	spec, err = gate.SpecOf(issueCoupon())
	require.NoError(t, err)
	require.Nil(t, spec.NeedsApproval, "no Approval: no call waits")
}

// A Review stands only with Approval; its summary is one line of printable
// text, at most 500 characters, and its error is the effect's.
func TestReviewDeclaration(t *testing.T) {
	t.Parallel()
	m := issueCoupon()
	m.Review = func(_ context.Context, _ gate.Tx, caller domain.Caller, a *couponArgs) (string, error) {
		if a.PercentOff > 90 {
			return "", gate.Invalid("percent_off", "at most 90 for %s", caller.TenantID)
		}
		return fmt.Sprintf("  %d%% off for %s\n\x00next line\u2028%s", a.PercentOff, a.CustomerID, strings.Repeat("x", 600)), nil
	}
	_, err := gate.SpecOf(m)
	require.ErrorContains(t, err, "Review is set but Approval is not")

	m.Approval = func(context.Context, gate.Tx, domain.Caller, *couponArgs) (bool, error) { return true, nil }
	spec, err := gate.SpecOf(m)
	require.NoError(t, err)
	summary, err := spec.Review(context.Background(), nil, toolspecCaller("acme"), json.RawMessage(`{"customer_id":"cus_1","percent_off":60}`))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(summary, "60% off for cus_1  next line "), summary)
	require.Equal(t, 500, utf8.RuneCountInString(summary))
	require.True(t, strings.HasSuffix(summary, "x…"))
	require.NotContains(t, summary, "\n")
	_, err = spec.Review(context.Background(), nil, toolspecCaller("acme"), json.RawMessage(`{"customer_id":"cus_1","percent_off":95}`))
	require.ErrorContains(t, err, "at most 90 for acme")
	spec, err = gate.SpecOf(issueCoupon())
	require.NoError(t, err)
	require.Nil(t, spec.Review)
}
