package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Multi round-trip requests (MCP 2026-07-28, "MRTR"): a tools/call whose
// answer needs a person answers input_required, with an elicitation the
// client shows the person and a requestState it echoes on its retry:
//   - a possible_duplicate (a guarded tool's re-minted key) asks, as a form
//     elicitation, whether this is a new, separate intent; the retry with
//     the person's "yes" and the state confirms the earlier operation the
//     state names (core.ConfirmField), and the gate decides as always;
//   - an approval wait asks, as a URL elicitation, to have a person decide
//     on the approval page; the retry is the same call (same key), which
//     the gate answers: the outcome once decided, input_required again
//     while it waits.
// A client that did not declare the elicitation mode on the request gets
// the answers of 2025-11-25 (the tool error, the waiting operation).
//
// requestState is attacker-controlled input: it is an HMAC-SHA256 over
// its payload under a key derived from the deployment secret, bound to
// the principal (tenant, user), the tool, the idempotency key, the
// fingerprint and the operation, and valid for stateTTL. A state that
// fails any check is refused (JSON-RPC -32602) before anything is read or
// written. It carries no authority the gate does not check again: a
// confirmation names an operation, which the duplicate guard still has to
// name, so a replayed state confirms nothing new, and an approval state
// only lets the same call be asked again.

// stateTTL is how long a requestState is accepted after it was issued.
const stateTTL = 15 * time.Minute

// The input request keys and the form's one field.
const (
	duplicateInput = "confirm_new_intent"
	confirmField   = "confirm"
)

// The kinds of requestState.
const (
	stateDuplicate = "duplicate"
	stateApproval  = "approval"
)

// mrtrCall is what the task layer read of a 2026-07-28 tools/call: the
// elicitation modes the client declared on it, and the retry's state and
// answers.
type mrtrCall struct {
	form, url      bool
	requestState   *string
	inputResponses map[string]json.RawMessage
}

// mrtrKey is the context key of a 2026-07-28 tools/call's *mrtrCall.
type mrtrKey struct{}

// readMRTR reads the elicitation capabilities in a call's _meta and the
// retry members of its params.
func readMRTR(c *callParams, params json.RawMessage) *mrtrCall {
	m := &mrtrCall{}
	if c != nil && c.meta != nil {
		var meta struct {
			Caps *struct {
				Elicitation map[string]json.RawMessage `json:"elicitation"`
			} `json:"io.modelcontextprotocol/clientCapabilities"`
		}
		if json.Unmarshal(c.meta, &meta) == nil && meta.Caps != nil && meta.Caps.Elicitation != nil {
			_, form := meta.Caps.Elicitation["form"]
			_, url := meta.Caps.Elicitation["url"]
			// An empty elicitation capability declares form mode.
			m.form = form || len(meta.Caps.Elicitation) == 0
			m.url = url
		}
	}
	var p struct {
		RequestState   *string                    `json:"requestState"`
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
	}
	if params != nil && json.Unmarshal(params, &p) == nil {
		m.requestState, m.inputResponses = p.RequestState, p.InputResponses
	}
	return m
}

// requestState is the signed payload of a state.
type requestState struct {
	Version   int    `json:"v"`
	Kind      string `json:"kind"`
	Tenant    string `json:"tenant"`
	User      string `json:"user"`
	Tool      string `json:"tool"`
	Key       string `json:"key"`
	ArgsHash  string `json:"fp"`
	Operation string `json:"op"`
	Expires   int64  `json:"exp"`
}

// stateSigner signs and verifies requestState.
type stateSigner struct{ key []byte }

// newStateSigner derives the signing key from secret; without one, a
// random key of the process (states then do not cross replicas or
// restarts: the client is asked again).
func newStateSigner(secret []byte) *stateSigner {
	if len(secret) == 0 {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		return &stateSigner{key: k}
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("idemgate mcp requestState v1"))
	return &stateSigner{key: mac.Sum(nil)}
}

func (s *stateSigner) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// sign returns the state's wire form: payload.mac, both base64url.
func (s *stateSigner) sign(st *requestState) string {
	b, _ := json.Marshal(st)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload))
}

// errState is a requestState that fails verification.
var errState = errors.New("requestState")

// verify returns the state of wire if its MAC is right and it has not
// expired at now.
func (s *stateSigner) verify(wire string, now time.Time) (*requestState, error) {
	payload, sig, ok := strings.Cut(wire, ".")
	if !ok || len(wire) > 4096 {
		return nil, fmt.Errorf("%w is not one this server issued", errState)
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(payload)) {
		return nil, fmt.Errorf("%w fails verification (altered, forged or issued by another deployment)", errState)
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	var st requestState
	if err != nil || json.Unmarshal(raw, &st) != nil || st.Version != 1 {
		return nil, fmt.Errorf("%w is not one this server issued", errState)
	}
	if now.Unix() >= st.Expires {
		return nil, fmt.Errorf("%w expired at %s: call again without it", errState, time.Unix(st.Expires, 0).UTC().Format(time.RFC3339))
	}
	return &st, nil
}

// stateError is the JSON-RPC error of a refused requestState.
func stateError(err error) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params: " + err.Error()}
}

// mrtrConfirm checks a retry's requestState against the call (the
// principal, tool, key and fingerprint it was issued for) and, for a
// duplicate question the person answered yes, returns the call's
// arguments with the confirmation of the operation the state names;
// answered says the person answered the duplicate question (yes or no),
// which is then not asked again: a "no" gets the possible_duplicate
// answer naming the earlier operation. A call without state returns c.raw
// as it is.
func (s *Server) mrtrConfirm(c *call, m *mrtrCall) (raw json.RawMessage, answered bool, err error) {
	if m.requestState == nil {
		return c.raw, false, nil
	}
	st, err := s.states.verify(*m.requestState, time.Now())
	if err != nil {
		return nil, false, stateError(err)
	}
	args, in := s.intentOf(c)
	if in == nil {
		return c.raw, false, nil // the gate refuses the arguments with its code
	}
	switch {
	case st.Tenant != c.actor.TenantID || st.User != c.actor.UserID:
		return nil, false, stateError(fmt.Errorf("%w was issued to another caller", errState))
	case st.Tool != c.tool.Name || st.Key != in.Key || st.ArgsHash != in.ArgsHash:
		return nil, false, stateError(fmt.Errorf("%w was issued for another call (tool, idempotency_key or arguments differ)", errState))
	}
	response, ok := m.inputResponses[duplicateInput]
	if st.Kind != stateDuplicate || !ok {
		return c.raw, false, nil
	}
	if !accepted(response) {
		return c.raw, true, nil
	}
	args[core.ConfirmField] = st.Operation
	return mustJSON(args), true, nil
}

// accepted reports whether an elicitation's answer is accept with the
// form's confirm field true.
func accepted(raw json.RawMessage) bool {
	var r mcp.ElicitResult
	if raw == nil || json.Unmarshal(raw, &r) != nil || r.Action != "accept" {
		return false
	}
	yes, _ := r.Content[confirmField].(bool)
	return yes
}

// mrtrAnswer turns a 2026-07-28 answer that needs a person into
// input_required, when the client declared the elicitation mode it needs;
// nil keeps the answer as it is.
func (s *Server) mrtrAnswer(c *call, m *mrtrCall, ans *Answer, cerr *callError) *mcp.CallToolResult {
	_, in := s.intentOf(c)
	if in == nil {
		return nil
	}
	st := &requestState{Version: 1, Tenant: c.actor.TenantID, User: c.actor.UserID, Tool: c.tool.Name,
		Key: in.Key, ArgsHash: in.ArgsHash, Expires: time.Now().Add(stateTTL).Unix()}
	switch {
	case m.form && cerr != nil && cerr.err.Code == vocab.CodePossibleDuplicate && cerr.operation != nil:
		earlier := cerr.operation
		st.Kind, st.Operation = stateDuplicate, earlier.OperationID
		msg := fmt.Sprintf("The same %s was requested %s under another key (operation %s, %s). "+
			"Is this a new, separate %s rather than a retry of that one?",
			c.tool.Name, earlier.CreatedAt.UTC().Format(time.RFC3339), earlier.OperationID, earlier.Status, c.tool.Name)
		return &mcp.CallToolResult{
			InputRequests: mcp.InputRequestMap{duplicateInput: &mcp.ElicitParams{
				Mode: "form", Message: msg,
				RequestedSchema: map[string]any{
					"type": "object",
					"properties": map[string]any{confirmField: map[string]any{
						"type": "boolean", "title": "Yes, this is a new " + c.tool.Name,
						"description": "Only if you intend a second, separate " + c.tool.Name + " beside operation " + earlier.OperationID,
					}},
					"required": []string{confirmField},
				},
			}},
			RequestState: s.states.sign(st),
		}
	case m.url && ans != nil && ans.Operation != nil && ans.Operation.Approval != nil && ans.Operation.Status == vocab.StatusAwaitingApproval:
		op := ans.Operation
		st.Kind, st.Operation = stateApproval, op.OperationID
		return &mcp.CallToolResult{
			InputRequests: mcp.InputRequestMap{approvalInput: &mcp.ElicitParams{
				Mode: "url", URL: op.Approval.URL,
				Message: fmt.Sprintf("A person of the tenant other than the caller must approve %s (operation %s) on this page before it runs; "+
					"the call is retried once it is decided.", c.tool.Name, op.OperationID),
			}},
			RequestState: s.states.sign(st),
		}
	}
	return nil
}

// intentOf decodes c's arguments and their intent (key and fingerprint),
// or nil for arguments the gate refuses (it answers them with its code).
func (s *Server) intentOf(c *call) (map[string]any, *core.Intent) {
	args, err := core.DecodeArgs(c.raw)
	if err != nil {
		return nil, nil
	}
	in, err := s.gate.NewIntent(c.tool.Name, args)
	if err != nil {
		return nil, nil
	}
	return args, in
}

// mrtrFrom returns the 2026-07-28 call's MRTR context, or nil.
func mrtrFrom(ctx context.Context) *mrtrCall {
	m, _ := ctx.Value(mrtrKey{}).(*mrtrCall)
	return m
}
