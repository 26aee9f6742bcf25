package idemgate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// Open a service on the embedded SQLite engine, migrate it, and mint a
// token for an agent; a scope no tool declares is refused.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idemgate-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg, err := idemgate.LoadConfig([]string{"--database-url=sqlite:" + filepath.Join(dir, "example.db")})
	if err != nil {
		panic(err)
	}
	type Args struct {
		CustomerID string `json:"customer_id" idem:"id"`
	}
	type Credit struct {
		CustomerID string `json:"customer_id"`
	}
	reg := gate.NewRegistry().MustAdd(&gate.Mutation[Args, Credit]{
		Name: "grant_credit", Title: "Grant a credit", Description: "One credit per key.", Scope: "credits:grant",
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[Args]) (*Credit, error) {
			return &Credit{CustomerID: op.Args.CustomerID}, nil
		},
	})
	svc, err := idemgate.Open(ctx, cfg, reg, nil)
	if err != nil {
		panic(err)
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		panic(err)
	}
	token, err := svc.CreateToken(ctx, "acme", "agent-1", "credits:grant", domain.ScopeOperationsRead)
	fmt.Println(len(token) > 20, err)
	_, err = svc.CreateToken(ctx, "acme", "agent-1", "billing:refund")
	fmt.Println(err != nil)
	// Output:
	// true <nil>
	// true
}
