package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// singleCall refuses JSON-RPC batches and envelopes with duplicate member
// names on /mcp, before the MCP SDK decodes anything. A batch would carry
// many tool calls (and their audit rows) in one HTTP request, around any
// per-request limit in front of the api; duplicate members ("arguments"
// twice, last one wins in Go's decoder) would let a proxy or log see other
// arguments than the ones executed. It reads a POST's body once, offers
// it to the fast path (which checks the same) and otherwise passes it to
// next (nil for other methods); r.Body reads it again.
func singleCall(m *metrics, fast *fastPath, next func(w http.ResponseWriter, r *http.Request, body []byte)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next(w, r, nil)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeRPCError(w, http.StatusRequestEntityTooLarge, "request body too large or unreadable")
			return
		}
		if fast.serve(w, r, body) {
			m.mcpFast.Inc()
			return
		}
		m.mcpSDK.Inc()
		if err := checkEnvelope(body); err != nil {
			writeRPCError(w, http.StatusBadRequest, err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next(w, r, body)
	})
}

// errBatch is the refusal of a JSON-RPC batch.
var errBatch = errors.New("JSON-RPC batches are not accepted: send one request per HTTP request")

// checkEnvelope returns an error for a batch or for an object with a
// member name twice, anywhere but inside params.arguments: the tool's own
// decoder refuses those with its code, the field and a denied audit row.
// Malformed JSON is left to the SDK's own answer.
func checkEnvelope(body []byte) error {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return errBatch
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object  bool
		keys    map[string]bool
		lastKey string
		path    string // member names from the root, dot-joined
	}
	var stack []*frame
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // end, or malformed: the SDK answers that
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				path := ""
				if n := len(stack); n > 0 {
					parent := stack[n-1]
					path = parent.path + "/"
					if parent.object {
						path += parent.lastKey
					}
				}
				stack = append(stack, &frame{object: t == '{', keys: map[string]bool{}, path: path})
				expectKey = t == '{'
				continue
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if expectKey {
				top := stack[len(stack)-1]
				inArguments := top.path == "/params/arguments" || strings.HasPrefix(top.path, "/params/arguments/")
				if top.keys[t] && !inArguments {
					return fmt.Errorf("the member %q appears twice in one object", t)
				}
				top.keys[t] = true
				top.lastKey = t
				expectKey = false
				continue
			}
		}
		// After a value, an object expects its next key.
		expectKey = len(stack) > 0 && stack[len(stack)-1].object
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
