// Command goclient is the go-sdk side of the browser tests
// (e2e/browser/approval-mcp.test.mjs): an MCP 2026-07-28 client that the
// Node test runs as a subprocess, one request a run, printing the result
// as one JSON line.
//
//	goclient call TOOL ARGS_JSON        a plain tools/call through the
//	                                    go-sdk v1.8 client session
//	goclient task-call TOOL ARGS_JSON   tools/call declaring the tasks
//	                                    extension (io.modelcontextprotocol/tasks)
//	goclient task-get TASK_ID           tasks/get
//	goclient task-update TASK_ID        tasks/update answering the approval's
//	                                    URL-mode elicitation with accept
//
// IDEMGATE_URL and IDEMGATE_TOKEN name the api and the bearer token. The
// go-sdk has no task API yet (go-sdk issue #626), so the task requests are
// sent as the extension says (its declaration in each request's _meta, the
// Mcp-* headers), over plain HTTP.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	base, token := os.Getenv("IDEMGATE_URL"), os.Getenv("IDEMGATE_TOKEN")
	if base == "" || token == "" {
		return errors.New("IDEMGATE_URL and IDEMGATE_TOKEN must be set")
	}
	if len(args) < 2 {
		return errors.New("usage: goclient call|task-call TOOL ARGS_JSON | task-get|task-update TASK_ID")
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var out any
	var err error
	switch args[0] {
	case "call":
		out, err = call(ctx, base, token, args[1:])
	case "task-call":
		if len(args) != 3 {
			return errors.New("usage: goclient task-call TOOL ARGS_JSON")
		}
		out, err = extSend(ctx, base, token, "tools/call", args[1], map[string]any{"name": args[1], "arguments": json.RawMessage(args[2])})
	case "task-get":
		out, err = extSend(ctx, base, token, "tasks/get", args[1], map[string]any{"taskId": args[1]})
	case "task-update":
		out, err = extSend(ctx, base, token, "tasks/update", args[1], map[string]any{"taskId": args[1],
			"inputResponses": map[string]any{"approval": map[string]any{"action": "accept"}}})
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// call is a plain tools/call through the go-sdk client's session.
func call(ctx context.Context, base, token string, args []string) (any, error) {
	if len(args) != 2 {
		return nil, errors.New("usage: goclient call TOOL ARGS_JSON")
	}
	var arguments map[string]any
	if err := json.Unmarshal([]byte(args[1]), &arguments); err != nil {
		return nil, fmt.Errorf("ARGS_JSON: %w", err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "idemgate-e2e-goclient", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token}},
	}, nil)
	if err != nil {
		return nil, err
	}
	defer session.Close()
	return session.CallTool(ctx, &mcp.CallToolParams{Name: args[0], Arguments: arguments})
}

// bearer adds the token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// extSend sends a 2026-07-28 request that declares the tasks extension and
// returns its result; a JSON-RPC error is an error.
func extSend(ctx context.Context, base, token, method, name string, params map[string]any) (any, error) {
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":      map[string]any{"name": "idemgate-e2e-goclient", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{
			"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}},
		},
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/mcp", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", name)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var msg struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d: %s", method, resp.StatusCode, raw)
	}
	if msg.Error != nil {
		return nil, fmt.Errorf("%s: JSON-RPC error %s", method, msg.Error)
	}
	return msg.Result, nil
}
