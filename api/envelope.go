package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// singleCall refuses JSON-RPC batches and envelopes with duplicate member
// names on /mcp, before the MCP SDK decodes anything. A batch would carry
// many tool calls (and their audit rows) in one HTTP request, around any
// per-request limit in front of the api; duplicate members ("arguments"
// twice, last one wins in Go's decoder) would let a proxy or log see other
// arguments than the ones executed.
func singleCall(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeRPCError(w, http.StatusRequestEntityTooLarge, "request body too large or unreadable")
			return
		}
		if err := checkEnvelope(body); err != nil {
			writeRPCError(w, http.StatusBadRequest, err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// errBatch is the refusal of a JSON-RPC batch.
var errBatch = errors.New("JSON-RPC batches are not accepted: send one request per HTTP request")

// checkEnvelope returns an error for a batch or for an object (at any depth)
// with a member name twice. Malformed JSON is left to the SDK's own answer.
func checkEnvelope(body []byte) error {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return errBatch
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	// A stack of objects' member sets; nil marks an array.
	var stack []map[string]bool
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // end, or malformed: the SDK answers that
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, map[string]bool{})
				expectKey = true
				continue
			case '[':
				stack = append(stack, nil)
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if expectKey {
				top := stack[len(stack)-1]
				if top[t] {
					return fmt.Errorf("the member %q appears twice in one object", t)
				}
				top[t] = true
				expectKey = false
				continue
			}
		}
		// After a value, an object expects its next key.
		expectKey = len(stack) > 0 && stack[len(stack)-1] != nil
	}
}

// writeRPCError answers a JSON-RPC "invalid request" error.
func writeRPCError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32600, "message": msg},
	})
}
