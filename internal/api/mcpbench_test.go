package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkMCPToolCall prices one MCP tools/call over HTTP on the real
// stack (net/http server on loopback, the api's middleware, the MCP layer,
// the gate on a test database of its own), from a plain HTTP client: the
// figure to watch is cpu-ms/op, the process's CPU per call (server and
// this client; Postgres's is not counted). Throughput is the repository's
// benchmark's (scripts/bench.sh), not this one's.
//
//	go test ./api -run '^$' -bench BenchmarkMCPToolCall -benchtime 2000x
func BenchmarkMCPToolCall(b *testing.B) {
	bundle := fuzzSetup(b)
	srv := httptest.NewServer(bundle.handler)
	b.Cleanup(srv.Close)
	client := srv.Client()
	call := func(tb testing.TB, id int, name, args string) []byte {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, name, args)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
		if err != nil {
			tb.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+fuzzTokenAll)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := client.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			tb.Fatalf("answered %d: %s (%v)", resp.StatusCode, out, err)
		}
		return out
	}
	credit := `{"customer_id":"cus_1","amount_cents":250,"currency":"usd","idempotency_key":"bench-key-0001"}`
	// The claim stays queued (no worker): every later call is in_flight.
	call(b, 0, "apply_credit", credit)
	for _, c := range []struct{ name, tool, args, want string }{
		// A retry of a claimed key: one SELECT and its audit row.
		{"InFlight", "apply_credit", credit, `"outcome":"in_flight"`},
		// A refused call: its denied audit row.
		{"Invalid", "apply_credit", `{"customer_id":"cus_1","amount_cents":-1,"currency":"usd","idempotency_key":"bench-key-0002"}`, `"isError":true`},
	} {
		b.Run(c.name, func(b *testing.B) {
			if out := call(b, 1, c.tool, c.args); !bytes.Contains(out, []byte(c.want)) {
				b.Fatalf("answer without %s: %s", c.want, out)
			}
			b.ReportAllocs()
			start := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				call(b, i, c.tool, c.args)
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
