package chaos

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
)

func TestNewPlanIsReproducibleAndSeedable(t *testing.T) {
	p1, f1 := NewPlan(7, 300, time.Minute)
	p2, f2 := NewPlan(7, 300, time.Minute)
	rows, ok := f1.Rows.(*tools.Seed)
	if !ok {
		t.Fatal("the seed file does not load the built-in tools' rows")
	}
	if !reflect.DeepEqual(p1, p2) || !reflect.DeepEqual(f1, f2) {
		t.Fatal("the same seed gave two different plans")
	}
	if p3, _ := NewPlan(8, 300, time.Minute); reflect.DeepEqual(p1.Ops, p3.Ops) {
		t.Fatal("two seeds gave the same plan")
	}

	// The seed file is what idemctl seed accepts.
	b, err := json.Marshal(f1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.ParseSeed(bytes.NewReader(b), &tools.Seed{}); err != nil {
		t.Fatalf("idemctl would reject the seed file: %v", err)
	}

	orders := map[string]int64{}
	for _, o := range rows.Orders {
		if o.AmountCents > ChargeAmount {
			t.Errorf("order %s of %d exceeds the test Stripe's charge amount %d", o.OrderID, o.AmountCents, ChargeAmount)
		}
		orders[o.OrderID] = o.AmountCents
	}
	keys, refunded, seats := map[string]bool{}, map[string]bool{}, map[string]bool{}
	byTool := map[string]int{}
	for _, op := range p1.Ops {
		byTool[op.Tool]++
		if keys[op.Key] {
			t.Errorf("key %s planned twice", op.Key)
		}
		keys[op.Key] = true
		if op.Dups < 1 || op.Dups > 3 {
			t.Errorf("op %d: %d callers", op.Index, op.Dups)
		}
		switch op.Tool {
		case ToolRefund:
			order := op.Args["order_id"].(string)
			amount := op.Args["amount_cents"].(int64)
			if refunded[order] {
				t.Errorf("order %s refunded by two operations", order)
			}
			refunded[order] = true
			if amount < 1 || amount > orders[order] {
				t.Errorf("op %d refunds %d of order %s (amount %d)", op.Index, amount, order, orders[order])
			}
		case ToolSeat:
			if seats[op.Seat] {
				t.Errorf("seat %s reset by two operations", op.Seat)
			}
			seats[op.Seat] = true
		}
	}
	for _, tool := range Tools {
		if byTool[tool] == 0 {
			t.Errorf("no %s operation in 300", tool)
		}
	}
}

func TestReadPlanKeepsIntegers(t *testing.T) {
	p, _ := NewPlan(3, 20, time.Minute)
	path := t.TempDir() + "/plan.json"
	if err := WriteJSON(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, got) {
		t.Fatalf("plan changed through JSON:\n%+v\n%+v", p.Ops[0], got.Ops[0])
	}
}

func TestOpFromMessageID(t *testing.T) {
	for in, want := range map[string]string{
		"idg_0b7e0a4c-1f7e-4c2b-9a53-8d1a2c3b4d5e_0@chaos.example":    "0b7e0a4c-1f7e-4c2b-9a53-8d1a2c3b4d5e",
		"<idg_0b7e0a4c-1f7e-4c2b-9a53-8d1a2c3b4d5e_12@chaos.example>": "0b7e0a4c-1f7e-4c2b-9a53-8d1a2c3b4d5e",
		"someone-else@example.com":                                    "",
	} {
		if got := opFromMessageID(in); got != want {
			t.Errorf("opFromMessageID(%q) = %q, want %q", in, got, want)
		}
	}
}
