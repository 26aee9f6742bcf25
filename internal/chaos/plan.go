// Package chaos drives scripts/chaos.sh: it plans a reproducible workload
// (a seed file and a list of operations), runs it against a live api with
// agent-like REST clients while worker processes are killed with SIGKILL and
// Postgres is restarted, and then counts every effect where it landed (the
// test Stripe, the ledger, the seats, Mailpit) to prove that the retry storm
// and the kills changed nothing.
//
// The command is internal/chaos/cmd/chaosdriver; the script owns the
// throwaway Postgres cluster, the test Stripe, Mailpit and the api, the
// driver owns the worker processes.
package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"

	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
)

// Plan constants. The tenant and token exist only in the throwaway database.
const (
	Tenant = "chaos"
	// Token is the fixed bearer token the seed file creates.
	Token = "idg_chaos_driver_0123456789"
	// ChargeAmount is every order's charge at the test Stripe (its
	// -auto-charge-amount): order amounts never exceed it.
	ChargeAmount = 100_000
	// Customers is how many customers the credits are spread over.
	Customers = 10
)

// The four mutating tools.
const (
	ToolRefund = "refund_order"
	ToolCredit = "apply_credit"
	ToolSeat   = "reset_seat"
	ToolMail   = "send_password_reset"
)

// Tools lists the mutating tools in report order.
var Tools = []string{ToolRefund, ToolCredit, ToolSeat, ToolMail}

// Op is one planned mutation: one idempotency key, called by Dups parallel
// callers with the same arguments (volatile fields may differ per caller).
type Op struct {
	Index int            `json:"index"`
	Tool  string         `json:"tool"`
	Key   string         `json:"key"`
	Args  map[string]any `json:"args"`
	// Volatile is the name of the tool's volatile argument that callers
	// vary ("reason", "memo"), or "".
	Volatile string `json:"volatile,omitempty"`
	// Dups is how many callers fire this call in parallel (1 to 3).
	Dups int `json:"dups"`
	// Seat is the seat, for reset_seat: every op resets its own seat.
	Seat string `json:"seat,omitempty"`
}

// Plan is the workload of one run.
type Plan struct {
	Seed     int64         `json:"seed"`
	Duration time.Duration `json:"duration"`
	Ops      []Op          `json:"ops"`
}

// DefaultOps scales the number of operations with the load duration:
// 150 a minute, at least 40.
func DefaultOps(d time.Duration) int {
	return max(40, int(150*d/time.Minute))
}

// agentScopes are what the chaos agent's token grants: every scope of the
// built-in tools and operations:read, not ops:admin.
func agentScopes() []string {
	return slices.DeleteFunc(tools.Scopes(), func(s string) bool { return s == tokenspec.ScopeOpsAdmin })
}

// NewPlan builds the workload for seed and n operations, and the seed file
// that creates what it needs: one order (with its own charge) per refund,
// one seat per seat reset, one user per mail, and Customers customers.
func NewPlan(seed int64, n int, duration time.Duration) (*Plan, *store.SeedFile) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6368616f73)) // "chaos"
	p := &Plan{Seed: seed, Duration: duration}
	rows := &tools.Seed{}
	f := &store.SeedFile{Rows: rows,
		Tokens: []store.SeedToken{{
			Tenant: Tenant, User: "chaos-agent", Token: Token,
			Scopes: agentScopes(),
		}},
	}
	for c := range Customers {
		rows.Customers = append(rows.Customers, tools.SeedCustomer{Tenant: Tenant, CustomerID: fmt.Sprintf("cus_c%d", c), Currency: "usd"})
	}
	var nRefund, nCredit, nSeat, nMail int
	for i := range n {
		op := Op{Index: i, Key: fmt.Sprintf("chaos-%d-op-%05d", seed, i), Dups: 1}
		switch r := rng.IntN(100); {
		case r < 40:
			op.Tool = ToolRefund
			order := fmt.Sprintf("ord_c%05d", nRefund)
			amount := int64(1000 + rng.IntN(ChargeAmount-1000+1))
			rows.Orders = append(rows.Orders, tools.SeedOrder{Tenant: Tenant, OrderID: order,
				ChargeID: fmt.Sprintf("ch_chaos_%05d", nRefund), AmountCents: amount, Currency: "usd"})
			op.Args = map[string]any{"order_id": order, "amount_cents": 1 + rng.Int64N(amount)}
			op.Volatile = "reason"
			nRefund++
		case r < 65:
			op.Tool = ToolCredit
			// An amount of the operation's own (its index plus a random
			// multiple of n): apply_credit holds the same credit under
			// another key as a possible duplicate.
			op.Args = map[string]any{"customer_id": fmt.Sprintf("cus_c%d", rng.IntN(Customers)),
				"amount_cents": int64(i+1) + int64(n)*rng.Int64N(max(1, 50_000/int64(n))), "currency": "usd"}
			op.Volatile = "memo"
			nCredit++
		case r < 85:
			op.Tool = ToolSeat
			op.Seat = fmt.Sprintf("seat_c%05d", nSeat)
			rows.Seats = append(rows.Seats, tools.SeedSeat{Tenant: Tenant, SeatID: op.Seat, UserID: fmt.Sprintf("usr_seat_%05d", nSeat)})
			op.Args = map[string]any{"seat_id": op.Seat}
			nSeat++
		default:
			op.Tool = ToolMail
			user := fmt.Sprintf("usr_m%05d", nMail)
			rows.Users = append(rows.Users, tools.SeedUser{Tenant: Tenant, UserID: user, Email: fmt.Sprintf("m%05d@chaos.example", nMail)})
			op.Args = map[string]any{"user_id": user}
			nMail++
		}
		switch r := rng.IntN(100); {
		case r < 15:
			op.Dups = 3
		case r < 35:
			op.Dups = 2
		}
		p.Ops = append(p.Ops, op)
	}
	return p, f
}

// WriteJSON writes v as indented JSON to path.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadPlan reads a plan written by WriteJSON.
func ReadPlan(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range p.Ops {
		// JSON numbers decode as float64; the api takes integers either way,
		// but keep them integers so re-encoding is stable.
		for k, v := range p.Ops[i].Args {
			if f, ok := v.(float64); ok {
				p.Ops[i].Args[k] = int64(f)
			}
		}
	}
	return &p, nil
}
