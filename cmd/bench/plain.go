package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/internal/vocab"
)

// --- the plain MCP server: what a team would write instead ---

// plainCreditIn are apply_credit's arguments as a team's own tool would
// take them. The key is accepted and ignored: this server has no
// idempotency at all.
type plainCreditIn struct {
	CustomerID     string `json:"customer_id" jsonschema:"The customer to credit."`
	AmountCents    int64  `json:"amount_cents" jsonschema:"The credit, in cents."`
	Currency       string `json:"currency" jsonschema:"The customer's currency, lower case."`
	Memo           string `json:"memo,omitempty" jsonschema:"A note for the ledger."`
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"Ignored: this server does not deduplicate."`
}

// plainCreditOut is the tool's answer: accepted, with River's job id.
type plainCreditOut struct {
	Outcome vocab.Outcome `json:"outcome"`
	JobID   int64         `json:"job_id"`
}

// plainStack is a go-sdk MCP server with one tool, apply_credit, that
// inserts bare River's credit job with InsertTx in its own transaction and
// answers; bare River's worker (bareWorker: apply_credit's domain
// statements and JobCompleteTx in one transaction) works it. It is served
// as idemgate's api serves MCP (Streamable HTTP, stateless, JSON
// responses, a JSON log line per call) behind a static bearer token check,
// on a loopback port.
type plainStack struct {
	bare *bareStack
	srv  *http.Server
	url  string
}

func startPlain(ctx context.Context, db *benchDB, tn tuning, logger *slog.Logger) (*plainStack, error) {
	bare, err := startBare(ctx, db, tn, logger, bareOptions{})
	if err != nil {
		return nil, err
	}
	s := &plainStack{bare: bare}
	server := mcp.NewServer(&mcp.Implementation{Name: "plain-credits", Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: false}},
	})
	mcp.AddTool(server, &mcp.Tool{Name: "apply_credit", Description: "Credit a customer's account."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in plainCreditIn) (*mcp.CallToolResult, plainCreditOut, error) {
			id, err := bare.insertJob(ctx, bareArgs{TenantID: benchTenant, CustomerID: in.CustomerID, AmountCents: in.AmountCents, Key: in.IdempotencyKey})
			if err != nil {
				logger.ErrorContext(ctx, "apply_credit failed", "error", err)
				return nil, plainCreditOut{}, errors.New("internal error")
			}
			logger.LogAttrs(ctx, slog.LevelInfo, "apply_credit", slog.String("tenant", benchTenant),
				slog.String("customer_id", in.CustomerID), slog.Int64("job_id", id))
			return nil, plainCreditOut{Outcome: vocab.OutcomeAccepted, JobID: id}, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		Logger:       logger,
	})
	want := []byte("Bearer " + benchToken)
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		bare.stop()
		return nil, err
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.url = "http://" + ln.Addr().String()
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *plainStack) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = s.srv.Shutdown(ctx)
	cancel()
	s.bare.stop()
}

// plainSpec is the plain MCP server driven by the client code of
// idemgate's MCP figures: one go-sdk session per client, callMCP.
func (r *runner) plainSpec() e2eSpec {
	return e2eSpec{accept: sPlainAccept, e2e: sPlainE2E,
		start: func(ctx context.Context, db *benchDB, c int) (func(context.Context, int, int) error, func(), error) {
			s, err := startPlain(ctx, db, r.tn, r.logger)
			if err != nil {
				return nil, nil, err
			}
			ss, closeSessions, err := sessions(ctx, s.url, c)
			if err != nil {
				s.stop()
				return nil, nil, err
			}
			op := func(ctx context.Context, w, _ int) error {
				_, _, raw := creditArgs(randomKey())
				ans, err := callMCP(ctx, ss[w], raw)
				if err != nil {
					return err
				}
				if ans.Outcome != vocab.OutcomeAccepted {
					return fmt.Errorf("outcome %s, want accepted", ans.Outcome)
				}
				return nil
			}
			return op, func() { closeSessions(); s.stop() }, nil
		}}
}
