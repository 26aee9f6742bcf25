package idemgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// A tool served on the embedded engine: a retry with the same key and
// arguments is replayed (one effect), and the same key with other
// arguments is a conflict naming the field.
func Example_retryReplayedAndConflict() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	dir, err := os.MkdirTemp("", "idemgate-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	type GrantArgs struct {
		CustomerID string `json:"customer_id" jsonschema:"The customer." idem:"id"`
		Cents      int64  `json:"cents" jsonschema:"The credit in cents." idem:"cents"`
	}
	type Grant struct {
		CustomerID string `json:"customer_id"`
		Cents      int64  `json:"cents"`
	}
	var effects atomic.Int64
	reg := gate.NewRegistry().MustAdd(&gate.Mutation[GrantArgs, Grant]{
		Name: "grant_credit", Title: "Grant a credit", Description: "One credit per idempotency_key.", Scope: "credits:grant",
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[GrantArgs]) (*Grant, error) {
			effects.Add(1) // in a real tool: tx.Exec(ctx, `INSERT …`)
			return &Grant{CustomerID: op.Args.CustomerID, Cents: op.Args.Cents}, nil
		},
	})

	addr := freeAddr()
	cfg, err := idemgate.LoadConfig([]string{"--database-url=sqlite:" + filepath.Join(dir, "example.db"), "--api-addr=" + addr, "--log-level=error"})
	if err != nil {
		panic(err)
	}
	svc, err := idemgate.Open(ctx, cfg, reg, nil)
	if err != nil {
		panic(err)
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		panic(err)
	}
	token, err := svc.CreateToken(ctx, "acme", "agent-1", "credits:grant", domain.ScopeOperationsRead)
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.RunAll(ctx) }()
	defer func() { stop(); <-done }()

	call := func(key string, cents int64) answer {
		body := fmt.Sprintf(`{"customer_id":"cus_1","cents":%d}`, cents)
		return post("http://"+addr+"/v1/tools/grant_credit", token, key, body)
	}
	first := call("grant-0001", 500)
	await("http://"+addr+"/v1/operations/grant_credit/grant-0001", token)
	again := call("grant-0001", 500)
	other := call("grant-0001", 700)
	fmt.Println(first.Outcome, again.Outcome, again.Operation.OperationID == first.Operation.OperationID, effects.Load())
	fmt.Println(other.Error.Code, other.Error.Fields)
	// Output:
	// accepted replayed true 1
	// idempotency_key_reuse_with_different_args [cents]
}

// answer is the REST twin's answer to a mutation call.
type answer struct {
	Outcome   string            `json:"outcome"`
	Operation *domain.Operation `json:"operation"`
	Error     *domain.Error     `json:"error"`
}

// exampleWait bounds every wait of the example: a deadline for a stuck
// run, not a speed requirement.
const exampleWait = 2 * time.Minute

// post calls a mutation; it waits for the api to listen first.
func post(url, token, key, body string) answer {
	for deadline := time.Now().Add(exampleWait); ; {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil { // not listening yet
			if time.Now().After(deadline) {
				panic(fmt.Sprintf("the api never answered within %s: %v", exampleWait, err))
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		var a answer
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil {
			panic(err)
		}
		if a.Error != nil && a.Error.Code == "unavailable" && time.Now().Before(deadline) { // the one writer busy: retry, same key
			time.Sleep(20 * time.Millisecond)
			continue
		}
		return a
	}
}

// await polls an operation until it is terminal.
func await(url, token string) {
	for deadline := time.Now().Add(exampleWait); ; {
		if time.Now().After(deadline) {
			panic(fmt.Sprintf("%s was not terminal within %s", url, exampleWait))
		}
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		var op domain.Operation
		err = json.NewDecoder(resp.Body).Decode(&op)
		resp.Body.Close()
		if err == nil && op.Status.Terminal() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr returns a local address nothing listens on now.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
