package tools_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
)

// designExample is the seed file of docs/design.md, verbatim.
const designExample = `{
  "orders":    [{"tenant": "acme", "order_id": "ord_9f2", "charge_id": "ch_123", "amount_cents": 5000, "currency": "usd"}],
  "customers": [{"tenant": "acme", "customer_id": "cus_1", "currency": "usd"}],
  "seats":     [{"tenant": "acme", "seat_id": "seat_1", "user_id": "usr_1"}],
  "users":     [{"tenant": "acme", "user_id": "usr_1", "email": "ana@example.com"}],
  "tokens":    [{"tenant": "acme", "user": "support-bot", "scopes": ["billing:refund"], "token": "idg_test_acme"}],
  "tenants":   [{"tenant": "acme", "reset_link_base": "https://app.acme.example/reset-password",
                 "approval_thresholds": {"refund_order": 10000}, "approval_mail_to": ["finance@acme.example"]}]
}`

func TestParseSeed(t *testing.T) {
	t.Parallel()

	t.Run("DesignExample", func(t *testing.T) {
		t.Parallel()
		f, err := store.ParseSeed(strings.NewReader(designExample), &tools.Seed{})
		require.NoError(t, err)
		require.Equal(t, &store.SeedFile{
			Rows: &tools.Seed{
				Orders:    []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}},
				Customers: []tools.SeedCustomer{{Tenant: "acme", CustomerID: "cus_1", Currency: "usd"}},
				Seats:     []tools.SeedSeat{{Tenant: "acme", SeatID: "seat_1", UserID: "usr_1"}},
				Users:     []tools.SeedUser{{Tenant: "acme", UserID: "usr_1", Email: "ana@example.com"}},
			},
			Tokens: []store.SeedToken{{Tenant: "acme", User: "support-bot", Scopes: []string{"billing:refund"}, Token: "idg_test_acme"}},
			Tenants: []store.SeedTenant{{Tenant: "acme", ResetLinkBase: "https://app.acme.example/reset-password",
				ApprovalThresholds: map[string]int64{"refund_order": 10000}, ApprovalMailTo: []string{"finance@acme.example"}}},
		}, f)
	})

	t.Run("EveryListOptional", func(t *testing.T) {
		t.Parallel()
		f, err := store.ParseSeed(strings.NewReader(`{}`), &tools.Seed{})
		require.NoError(t, err)
		require.Equal(t, &store.SeedFile{Rows: &tools.Seed{}}, f)
	})

	t.Run("OptionalFields", func(t *testing.T) {
		t.Parallel()
		f, err := store.ParseSeed(strings.NewReader(`{
			"seats": [{"tenant": "acme", "seat_id": "seat_2"}],
			"tokens": [{"tenant": "acme", "user": "ops", "scopes": ["ops:admin", "operations:read"],
			            "expires_at": "2030-01-02T03:04:05Z"}]}`), &tools.Seed{})
		require.NoError(t, err)
		require.Empty(t, f.Rows.(*tools.Seed).Seats[0].UserID)
		require.Empty(t, f.Tokens[0].Token)
		require.Equal(t, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), *f.Tokens[0].ExpiresAt)
	})

	t.Run("ApprovalMailTo", func(t *testing.T) {
		t.Parallel()
		f, err := store.ParseSeed(strings.NewReader(`{"tenants": [
			{"tenant": "acme", "approval_mail_to": ["finance@acme.example", "cfo@acme.example"]},
			{"tenant": "beta", "approval_mail_to": []}]}`), &tools.Seed{})
		require.NoError(t, err)
		require.Equal(t, []string{"finance@acme.example", "cfo@acme.example"}, f.Tenants[0].ApprovalMailTo)
		require.Empty(t, f.Tenants[1].ApprovalMailTo, "an empty list mails nobody")
	})

	t.Run("MaxAmount", func(t *testing.T) {
		t.Parallel()
		_, err := store.ParseSeed(strings.NewReader(
			`{"orders": [{"tenant": "a", "order_id": "o", "charge_id": "c", "amount_cents": 10000000000, "currency": "eur"}]}`), &tools.Seed{})
		require.NoError(t, err)
	})
}

// seedOrder is a seed file of a valid order and one with fields.
func seedOrder(fields string) string {
	return `{"orders": [{"tenant": "acme", "order_id": "ord_1", "charge_id": "ch_1", "amount_cents": 100, "currency": "usd"},` +
		`{` + fields + `}]}`
}

// seedToken is a seed file of one token with fields.
func seedToken(fields string) string { return `{"tokens": [{` + fields + `}]}` }

// parseSeedRefusals are seed files ParseSeed refuses, with what the error
// says.
var parseSeedRefusals = []struct {
	name    string
	json    string
	wantErr string
}{
	{"Empty", ``, "seed file: empty"},
	{"NotAnObject", `[]`, "seed file: json: cannot unmarshal array"},
	{"Malformed", `{"orders": [`, "seed file: unexpected EOF"},
	{"TrailingData", `{} {}`, "unexpected data after the JSON object"},
	{"UnknownTopLevelField", `{"products": []}`, `unknown field "products"`},
	{"UnknownTenantField", `{"tenants": [{"tenant": "a", "name": "A"}]}`, `unknown field "name"`},
	{"UnknownEntryField", `{"users": [{"tenant": "a", "user_id": "u", "email": "a@b.c", "name": "Ana"}]}`, `unknown field "name"`},
	{"WrongType", `{"orders": [{"amount_cents": "5000"}]}`, "amount_cents"},

	{"OrderTenantMissing", seedOrder(`"order_id": "o", "charge_id": "c", "amount_cents": 1, "currency": "usd"`), "orders[1].tenant: required"},
	{"OrderTenantInvalid", seedOrder(`"tenant": "ac\tme", "order_id": "o", "charge_id": "c", "amount_cents": 1, "currency": "usd"`), "orders[1].tenant: \"ac\\tme\" has the unprintable character U+0009"},
	{"OrderTenantTooLong", seedOrder(`"tenant": "` + strings.Repeat("a", 256) + `", "order_id": "o", "charge_id": "c", "amount_cents": 1, "currency": "usd"`), "orders[1].tenant:"},
	{"OrderIDMissing", seedOrder(`"tenant": "a", "charge_id": "c", "amount_cents": 1, "currency": "usd"`), "orders[1].order_id: required"},
	{"OrderIDInvalid", seedOrder(`"tenant": "a", "order_id": "ord/1", "charge_id": "c", "amount_cents": 1, "currency": "usd"`), "orders[1].order_id:"},
	{"OrderChargeMissing", seedOrder(`"tenant": "a", "order_id": "o", "amount_cents": 1, "currency": "usd"`), "orders[1].charge_id: required"},
	{"OrderAmountMissing", seedOrder(`"tenant": "a", "order_id": "o", "charge_id": "c", "currency": "usd"`), "orders[1].amount_cents: must be positive"},
	{"OrderAmountZero", seedOrder(`"tenant": "a", "order_id": "o", "charge_id": "c", "amount_cents": 0, "currency": "usd"`), "orders[1].amount_cents: must be positive"},
	{"OrderAmountNegative", seedOrder(`"tenant": "a", "order_id": "o", "charge_id": "c", "amount_cents": -5, "currency": "usd"`), "orders[1].amount_cents: must be positive"},
	{"OrderAmountTooLarge", seedOrder(`"tenant": "a", "order_id": "o", "charge_id": "c", "amount_cents": 10000000001, "currency": "usd"`), "orders[1].amount_cents: must be at most 10000000000"},
	{"OrderCurrencyMissing", seedOrder(`"tenant": "a", "order_id": "o", "charge_id": "c", "amount_cents": 1`), "orders[1].currency:"},
	{"OrderCurrencyUppercase", seedOrder(`"tenant": "a", "order_id": "o", "charge_id": "c", "amount_cents": 1, "currency": "USD"`), "orders[1].currency: \"USD\" must be 3 lowercase letters"},
	{"OrderCurrencyLength", seedOrder(`"tenant": "a", "order_id": "o", "charge_id": "c", "amount_cents": 1, "currency": "usdt"`), "orders[1].currency:"},
	{"OrderDuplicate", seedOrder(`"tenant": "acme", "order_id": "ord_1", "charge_id": "c", "amount_cents": 1, "currency": "usd"`), "orders[1]: duplicates orders[0]"},

	{"CustomerIDMissing", `{"customers": [{"tenant": "a", "currency": "usd"}]}`, "customers[0].customer_id: required"},
	{"CustomerTenantInvalid", `{"customers": [{"tenant": "a\u0000", "customer_id": "c", "currency": "usd"}]}`, "customers[0].tenant:"},
	{"CustomerCurrencyInvalid", `{"customers": [{"tenant": "a", "customer_id": "c", "currency": "us"}]}`, "customers[0].currency:"},
	{"CustomerDuplicate", `{"customers": [{"tenant": "a", "customer_id": "c", "currency": "usd"}, {"tenant": "a", "customer_id": "c", "currency": "eur"}]}`, "customers[1]: duplicates customers[0]"},

	{"SeatIDMissing", `{"seats": [{"tenant": "a"}]}`, "seats[0].seat_id: required"},
	{"SeatTenantMissing", `{"seats": [{"seat_id": "s"}]}`, "seats[0].tenant: required"},
	{"SeatUserInvalid", `{"seats": [{"tenant": "a", "seat_id": "s", "user_id": "u 1"}]}`, "seats[0].user_id:"},
	{"SeatDuplicate", `{"seats": [{"tenant": "a", "seat_id": "s"}, {"tenant": "a", "seat_id": "s"}]}`, "seats[1]: duplicates seats[0]"},

	{"UserIDMissing", `{"users": [{"tenant": "a", "email": "a@b.c"}]}`, "users[0].user_id: required"},
	{"UserTenantInvalid", `{"users": [{"tenant": "", "user_id": "u", "email": "a@b.c"}]}`, "users[0].tenant: required"},
	{"UserEmailMissing", `{"users": [{"tenant": "a", "user_id": "u"}]}`, "users[0].email: required"},
	{"UserEmailNoAt", `{"users": [{"tenant": "a", "user_id": "u", "email": "ana.example.com"}]}`, "users[0].email: \"ana.example.com\" is not an email address"},
	{"UserEmailDisplayName", `{"users": [{"tenant": "a", "user_id": "u", "email": "Ana <ana@example.com>"}]}`, "users[0].email:"},
	{"UserDuplicate", `{"users": [{"tenant": "a", "user_id": "u", "email": "a@b.c"}, {"tenant": "a", "user_id": "u", "email": "d@e.f"}]}`, "users[1]: duplicates users[0]"},

	{"TenantMissing", `{"tenants": [{"reset_link_base": "https://a.example.com/r"}]}`, "tenants[0].tenant: required"},
	{"TenantInvalid", `{"tenants": [{"tenant": " ab"}]}`, "tenants[0].tenant:"},
	{"TenantLinkBaseRelative", `{"tenants": [{"tenant": "a", "reset_link_base": "/reset"}]}`, `tenants[0].reset_link_base: "/reset" is not an absolute http or https URL`},
	{"TenantLinkBaseAllInterfaces", `{"tenants": [{"tenant": "a", "reset_link_base": "http://0.0.0.0:8080/reset-password"}]}`, "tenants[0].reset_link_base:"},
	{"TenantLinkBaseWithToken", `{"tenants": [{"tenant": "a", "reset_link_base": "https://a.example.com/r?token=x"}]}`, "token parameter"},
	{"TenantThresholdNotPositive", `{"tenants": [{"tenant": "a", "approval_thresholds": {"refund_order": 0}}]}`, `tenants[0].approval_thresholds: "refund_order": 0 must be a tool name with a positive amount in cents`},
	{"TenantThresholdBadTool", `{"tenants": [{"tenant": "a", "approval_thresholds": {"Refund Order": 100}}]}`, `tenants[0].approval_thresholds: "Refund Order"`},
	{"TenantMailToEmptyEntry", `{"tenants": [{"tenant": "a", "approval_mail_to": ["fin@a.example", ""]}]}`, "tenants[0].approval_mail_to[1]: required"},
	{"TenantMailToNoAt", `{"tenants": [{"tenant": "a", "approval_mail_to": ["finance"]}]}`, `tenants[0].approval_mail_to[0]: "finance" is not an email address like ana@example.com`},
	{"TenantMailToDisplayName", `{"tenants": [{"tenant": "a", "approval_mail_to": ["Fin <fin@a.example>"]}]}`, `tenants[0].approval_mail_to[0]: "Fin <fin@a.example>" is not an email address`},
	{"TenantMailToTwoInOne", `{"tenants": [{"tenant": "a", "approval_mail_to": ["fin@a.example, ops@a.example"]}]}`, "tenants[0].approval_mail_to[0]:"},
	{"TenantMailToRepeated", `{"tenants": [{"tenant": "a", "approval_mail_to": ["fin@a.example", "FIN@a.example"]}]}`, `tenants[0].approval_mail_to[1]: "FIN@a.example" is listed twice`},
	{"TenantMailToNotAList", `{"tenants": [{"tenant": "a", "approval_mail_to": "fin@a.example"}]}`, "approval_mail_to"},
	{"TenantDuplicate", `{"tenants": [{"tenant": "a"}, {"tenant": "a", "reset_link_base": "https://a.example.com/r"}]}`, "tenants[1]: duplicates tenants[0]"},

	{"TokenTenantMissing", seedToken(`"user": "u", "scopes": ["billing:refund"]`), "tokens[0].tenant: required"},
	{"TokenUserMissing", seedToken(`"tenant": "a", "scopes": ["billing:refund"]`), "tokens[0].user: required"},
	{"TokenUserInvalid", seedToken(`"tenant": "a", "user": "support bot ", "scopes": ["billing:refund"]`), "tokens[0].user:"},
	{"TokenScopesMissing", seedToken(`"tenant": "a", "user": "u"`), "tokens[0].scopes: must list at least one scope"},
	{"TokenScopesEmpty", seedToken(`"tenant": "a", "user": "u", "scopes": []`), "tokens[0].scopes: must list at least one scope"},
	{"TokenScopeMalformed", seedToken(`"tenant": "a", "user": "u", "scopes": ["billing:refund", "everything"]`), `tokens[0].scopes: scope "everything" must look like resource:action`},
	{"TokenScopeRepeated", seedToken(`"tenant": "a", "user": "u", "scopes": ["seats:reset", "seats:reset"]`), `tokens[0].scopes: scope "seats:reset" is listed twice`},
	{"TokenValueNoPrefix", seedToken(`"tenant": "a", "user": "u", "scopes": ["seats:reset"], "token": "test_acme_1"`), "tokens[0].token: must be \"idg_\""},
	{"TokenValueTooShort", seedToken(`"tenant": "a", "user": "u", "scopes": ["seats:reset"], "token": "idg_abc"`), "tokens[0].token:"},
	{"TokenValueBadChar", seedToken(`"tenant": "a", "user": "u", "scopes": ["seats:reset"], "token": "idg_abc.def"`), "tokens[0].token:"},
	{"TokenExpiresAtInvalid", seedToken(`"tenant": "a", "user": "u", "scopes": ["seats:reset"], "expires_at": "tomorrow"`), "seed file: parsing time"},
	{"TokenValueDuplicate", `{"tokens": [{"tenant": "a", "user": "u", "scopes": ["seats:reset"], "token": "idg_same_value"},
		{"tenant": "b", "user": "v", "scopes": ["seats:reset"], "token": "idg_same_value"}]}`, "tokens[1]: duplicates tokens[0]"},
}

func TestParseSeedRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range parseSeedRefusals {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := store.ParseSeed(strings.NewReader(tt.json), &tools.Seed{})
			require.Error(t, err)
			require.Nil(t, f)
			require.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestParseSeedWithoutTheBuiltins(t *testing.T) {
	t.Parallel()
	f, err := store.ParseSeed(strings.NewReader(`{"tokens": [{"tenant": "a", "user": "u", "scopes": ["x:y"]}]}`), nil)
	require.NoError(t, err)
	require.Nil(t, f.Rows)
	_, err = store.ParseSeed(strings.NewReader(`{"orders": []}`), nil)
	require.ErrorContains(t, err, `seed file: json: unknown field "orders"`)
}

func TestSeedFileRoundTrips(t *testing.T) {
	t.Parallel()
	f, err := store.ParseSeed(strings.NewReader(designExample), &tools.Seed{})
	require.NoError(t, err)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	again, err := store.ParseSeed(bytes.NewReader(b), &tools.Seed{})
	require.NoError(t, err)
	require.Equal(t, f, again)
}

func TestSeedResultJSON(t *testing.T) {
	t.Parallel()
	var res store.SeedResult
	res.Count("orders").Created = 2
	res.Count("users").Existing = 1
	res.Tokens.Created = 1
	res.CreatedTokens = []store.SeedCreatedToken{}
	b, err := json.Marshal(res)
	require.NoError(t, err)
	require.JSONEq(t, `{"orders":{"created":2,"existing":0},"users":{"created":0,"existing":1},
		"tokens":{"created":1,"existing":0},"tenants":{"created":0,"existing":0},"created_tokens":[]}`, string(b))
	require.True(t, strings.HasPrefix(string(b), `{"orders":`), "the rows' sections come first: %s", b)
	var back store.SeedResult
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, res, back)
}
