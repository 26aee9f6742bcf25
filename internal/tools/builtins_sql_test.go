package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/builtins"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The built-in tools' own SQL on both engines: what the engines'
// conformance suite checked while that SQL was theirs (store.Domain).

type sqlBundle struct {
	db   tools.DB
	deps *tools.Deps
}

func newSQLBundle(t *testing.T, engine string) *sqlBundle {
	t.Helper()
	var st interface {
		core.Store
		store.Seeder
	}
	if engine == gate.Postgres {
		_, pool := pgtest.NewDB(t)
		st = pgengine.New(pool)
	} else {
		_, db := sqlitetest.NewDB(t)
		st = sqliteengine.New(db)
	}
	_, err := st.Seed(context.Background(), &store.SeedFile{
		Rows: &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}}, Customers: []tools.SeedCustomer{{Tenant: "acme", CustomerID: "cus_1", Currency: "usd"}, {Tenant: "acme", CustomerID: "cus_2", Currency: "usd"}}, Seats: []tools.SeedSeat{{Tenant: "acme", SeatID: "seat_1", UserID: "usr_1"}}, Users: []tools.SeedUser{{Tenant: "acme", UserID: "usr_1", Email: "ana@example.com"}}},
	})
	require.NoError(t, err)
	db := builtins.StoreDB(st)
	return &sqlBundle{db: db, deps: &tools.Deps{DB: db}}
}

func (b *sqlBundle) count(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.db(context.Background(), func(tx gate.Tx) error { return tx.QueryRow(context.Background(), query, args...).Scan(&n) }))
	return n
}

func opID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

func claim(toolName string, n int, args string) *core.Claim {
	return &core.Claim{OperationID: opID(n), TenantID: "acme", Tool: toolName, IdempotencyKey: "key-" + opID(n),
		DownstreamKey: "idg_" + opID(n) + "_0", Args: json.RawMessage(args)}
}

func TestBuiltinSQL(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{gate.Postgres, gate.SQLite} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			t.Run("RefundRecord", func(t *testing.T) { t.Parallel(); checkRefundRecord(t, newSQLBundle(t, engine)) })
			t.Run("ApprovalThresholds", func(t *testing.T) { t.Parallel(); checkApprovalThresholds(t, newSQLBundle(t, engine)) })
			t.Run("Ledger", func(t *testing.T) { t.Parallel(); checkLedger(t, newSQLBundle(t, engine)) })
			t.Run("SeatReset", func(t *testing.T) { t.Parallel(); checkSeatReset(t, newSQLBundle(t, engine)) })
			t.Run("ResetTokens", func(t *testing.T) { t.Parallel(); checkResetTokens(t, newSQLBundle(t, engine)) })
		})
	}
}

// checkRefundRecord: the same Stripe refund recorded twice counts once; a
// rolled-back record leaves nothing; more than the order's amount and an
// unknown order are refused and change nothing.
func checkRefundRecord(t *testing.T, b *sqlBundle) {
	ctx := context.Background()
	spec, err := tools.Spec(tools.RefundOrder(b.deps))
	require.NoError(t, err)
	record := func(n int, order, refundID string, cents int64, fail bool) error {
		c := claim("refund_order", n, `{"order_id":"`+order+`","amount_cents":1}`)
		res, _ := json.Marshal(tools.Refund{RefundID: refundID, OrderID: order, AmountCents: cents, Currency: "usd", Status: "succeeded"})
		return b.db(ctx, func(tx gate.Tx) error {
			if err := spec.Effect.Record(ctx, tx, c, res); err != nil {
				return err
			}
			if fail {
				return errors.New("roll back")
			}
			return nil
		})
	}
	refunded := func() int64 {
		return b.count(t, `SELECT refunded_cents FROM orders WHERE tenant_id = 'acme' AND order_id = 'ord_9f2'`)
	}
	for range 2 {
		require.NoError(t, record(1, "ord_9f2", "re_1", 1200, false))
	}
	require.EqualValues(t, 1200, refunded())
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM refunds`))

	require.Error(t, record(2, "ord_9f2", "re_2", 100, true))
	require.Error(t, record(3, "ord_9f2", "re_3", 4000, false), "more than the order's amount")
	require.Error(t, record(4, "ord_none", "re_4", 1, false), "an unknown order")
	require.EqualValues(t, 1200, refunded())
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM refunds`))
}

// checkLedger: one entry per operation, balances per customer; the same
// operation again is refused.
func checkLedger(t *testing.T, b *sqlBundle) {
	ctx := context.Background()
	spec, err := tools.Spec(tools.ApplyCredit(b.deps))
	require.NoError(t, err)
	apply := func(n int, customer string, cents int64) error {
		c := claim("apply_credit", n, fmt.Sprintf(`{"customer_id":%q,"amount_cents":%d,"currency":"usd","memo":"goodwill"}`, customer, cents))
		return b.db(ctx, func(tx gate.Tx) error { _, err := spec.Effect.Apply(ctx, tx, c); return err })
	}
	require.NoError(t, apply(1, "cus_1", 500))
	require.NoError(t, apply(2, "cus_1", 250))
	require.NoError(t, apply(3, "cus_2", 100))
	require.Error(t, apply(1, "cus_1", 500), "one entry per operation")
	require.EqualValues(t, 3, b.count(t, `SELECT count(*) FROM ledger_entries`))
	require.EqualValues(t, 750, b.count(t, `SELECT sum(amount_cents) FROM ledger_entries WHERE customer_id = 'cus_1'`))
	require.EqualValues(t, 100, b.count(t, `SELECT sum(amount_cents) FROM ledger_entries WHERE customer_id = 'cus_2'`))
}

// checkSeatReset: the first reset frees the seat, the second finds it free;
// an unknown seat fails definitively with nothing written.
func checkSeatReset(t *testing.T, b *sqlBundle) {
	ctx := context.Background()
	spec, err := tools.Spec(tools.ResetSeat(b.deps))
	require.NoError(t, err)
	reset := func(n int, seat string) (*tools.Seat, error) {
		var s tools.Seat
		err := b.db(ctx, func(tx gate.Tx) error {
			res, err := spec.Effect.Apply(ctx, tx, claim("reset_seat", n, `{"seat_id":"`+seat+`"}`))
			if err != nil {
				return err
			}
			return json.Unmarshal(res, &s)
		})
		return &s, err
	}
	first, err := reset(1, "seat_1")
	require.NoError(t, err)
	require.True(t, first.Changed)
	second, err := reset(2, "seat_1")
	require.NoError(t, err)
	require.False(t, second.Changed, "the first reset freed the seat")
	_, err = reset(3, "seat_9")
	require.Error(t, err)
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM seats WHERE seat_id = 'seat_1' AND user_id IS NOT NULL`))
}

// checkResetTokens: a token is redeemed once (then already used, twice);
// an expired one stays expired; an unknown one is not found; of 8
// concurrent redeems exactly one consumes the token.
func checkResetTokens(t *testing.T, b *sqlBundle) {
	ctx := context.Background()
	insert := func(n int, hash string, valid bool) {
		require.NoError(t, b.db(ctx, func(tx gate.Tx) error {
			expires := `now() + interval '1 hour'`
			if !valid {
				expires = `now() - interval '1 hour'`
			}
			if tx.Engine() == gate.SQLite {
				expires = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+1 hour')`
				if !valid {
					expires = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour')`
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO password_reset_tokens (tenant_id, user_id, operation_id, token_hash, message_id, expires_at)
				VALUES ('acme', 'usr_1', $1, $2, $3, `+expires+`)`, opID(n), []byte(hash), "<m"+opID(n)+"@idemgate>")
			return err
		}))
	}
	r := &tools.ResetTokens{DB: b.db}
	insert(1, "hash-once-0123456789abcdef012345", true)
	red, err := r.ResetTokenRedeem(ctx, []byte("hash-once-0123456789abcdef012345"))
	require.NoError(t, err)
	require.Equal(t, "usr_1", red.UserID)
	require.Equal(t, opID(1), red.OperationID)
	for range 2 {
		_, err = r.ResetTokenRedeem(ctx, []byte("hash-once-0123456789abcdef012345"))
		require.ErrorIs(t, err, vocab.ErrAlreadyUsed)
	}
	insert(2, "hash-expd-0123456789abcdef012345", false)
	for range 2 {
		_, err = r.ResetTokenRedeem(ctx, []byte("hash-expd-0123456789abcdef012345"))
		require.ErrorIs(t, err, vocab.ErrExpired)
	}
	_, err = r.ResetTokenRedeem(ctx, []byte("hash-none-0123456789abcdef012345"))
	require.ErrorIs(t, err, vocab.ErrNotFound)

	insert(3, "hash-conc-0123456789abcdef012345", true)
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := r.ResetTokenRedeem(ctx, []byte("hash-conc-0123456789abcdef012345"))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	redeemed := 0
	for err := range errs {
		if err == nil {
			redeemed++
			continue
		}
		if errors.Is(err, vocab.ErrUnavailable) { // SQLite's one writer busy: not a redeem
			continue
		}
		require.ErrorIs(t, err, vocab.ErrAlreadyUsed)
	}
	require.Equal(t, 1, redeemed, "one of %d concurrent redeems consumes the token", n)
}

// checkApprovalThresholds: a seeded threshold makes refund_order and
// apply_credit ask for approval above it (not at it), for its tenant only;
// no threshold asks nothing; a second seed replaces the value.
func checkApprovalThresholds(t *testing.T, b *sqlBundle) {
	ctx := context.Background()
	seed := func(thresholds map[string]int64) {
		require.NoError(t, b.db(ctx, func(tx gate.Tx) error {
			return (&tools.Seed{}).Load(ctx, tx.(core.Tx), []store.SeedTenant{{Tenant: "acme", ApprovalThresholds: thresholds}}, &store.SeedResult{})
		}))
	}
	needs := func(spec *toolspec.Spec, tenant, args string) bool {
		var got bool
		require.NoError(t, b.db(ctx, func(tx gate.Tx) error {
			var err error
			got, err = spec.NeedsApproval(ctx, tx, toolspec.Caller{TenantID: tenant, UserID: "bot"}, json.RawMessage(args))
			return err
		}))
		return got
	}
	refund, err := tools.Spec(tools.RefundOrder(b.deps))
	require.NoError(t, err)
	credit, err := tools.Spec(tools.ApplyCredit(b.deps))
	require.NoError(t, err)
	const big, small = `{"order_id":"ord_9f2","amount_cents":4000}`, `{"order_id":"ord_9f2","amount_cents":1000}`
	require.False(t, needs(refund, "acme", big), "no threshold: no approval")

	seed(map[string]int64{"refund_order": 1000, "apply_credit": 300})
	require.True(t, needs(refund, "acme", big))
	require.False(t, needs(refund, "acme", small), "at the threshold: no approval")
	require.False(t, needs(refund, "globex", big), "another tenant's threshold")
	require.True(t, needs(credit, "acme", `{"customer_id":"cus_1","amount_cents":301,"currency":"usd"}`))
	require.False(t, needs(credit, "acme", `{"customer_id":"cus_1","amount_cents":300,"currency":"usd"}`))

	seed(map[string]int64{"refund_order": 5000})
	require.False(t, needs(refund, "acme", big), "the second seed's value wins")
}
