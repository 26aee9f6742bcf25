package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// TTL bounds and defaults. A claim becomes eligible for take-over and
// pruning TTL after it turns terminal.
const (
	// MinTTL is the shortest TTL a tool may configure.
	MinTTL = time.Minute
	// MaxTTL is the longest TTL a tool may configure.
	MaxTTL = 7 * 24 * time.Hour
	// DefaultRetention is how long after its TTL a finished intent is
	// remembered (as a tombstone) so that the same key and arguments are
	// refused rather than run again.
	DefaultRetention = 30 * 24 * time.Hour
	// MaxRetention is the longest retention a tool may configure.
	MaxRetention = 365 * 24 * time.Hour
	// KeyMemory is how long after its retention a forgotten history row
	// stays to number the next intent of its key and fingerprint (its
	// incarnation, which its downstream keys carry). Past it, a new intent
	// starts again at incarnation 0.
	KeyMemory = 365 * 24 * time.Hour
	// DefaultReclaimBudget is how many times the reaper re-enqueues a claim
	// whose lease expired before it fails it with outcome_unknown.
	DefaultReclaimBudget = 5
	// MaxDuplicateWindow is the longest DuplicateWindow a tool may configure.
	MaxDuplicateWindow = 24 * time.Hour
)

// ConfirmField is the argument with which a call of a guarded tool
// confirms that it is a new intent beside the operation a
// possible_duplicate answer named: that operation's id. Like the
// idempotency key, it is neither fingerprinted nor stored with the
// arguments.
const ConfirmField = "confirm_duplicate_of"

// Policy is what the gate knows about one mutating tool. A mutating tool
// without a policy cannot be registered: nothing mutates outside the gate.
type Policy struct {
	// Tool is the tool's name, such as refund_order.
	Tool string
	// TTL is how long a terminal claim keeps answering replays before a new
	// intent may take its key over. Between MinTTL and MaxTTL.
	TTL time.Duration
	// VolatileFields are top-level arguments left out of the fingerprint:
	// changing them on a retry is not a conflict (a free-text reason, a memo).
	VolatileFields []string
	// AuditArgFields are the arguments copied into audit rows; every other
	// argument is left out. Empty keeps none.
	AuditArgFields []string
	// ResultFields are the top-level result members kept in the claim and
	// returned on replay; every other member is dropped before storing.
	ResultFields []string
	// Retention is how long after the TTL the intent is remembered: the
	// same key with the same arguments answers idempotency_key_expired and
	// never runs again. Zero means DefaultRetention; negative means none.
	Retention time.Duration
	// InflightTimeout overrides the global in-flight lease for this tool
	// when non-zero.
	InflightTimeout time.Duration
	// ReclaimBudget is how many leases the reaper lets a claim take before it
	// fails it with outcome_unknown. Zero means DefaultReclaimBudget.
	ReclaimBudget int
	// FailUnknownOutcome makes the reaper fail an expired lease with
	// outcome_unknown at once instead of re-running the effect, for a
	// downstream that cannot deduplicate (SMTP) when the operator prefers a
	// human to decide.
	FailUnknownOutcome bool
	// DuplicateWindow, when positive, guards the tool against re-minted
	// keys: a call whose fingerprint matches an intent of the same tenant
	// and tool claimed under another key less than DuplicateWindow ago (or
	// still waiting or running) is refused with possible_duplicate naming
	// it, unless it confirms that operation (ConfirmField). Zero: off.
	DuplicateWindow time.Duration
}

// Validate checks the policy's fields and names the field that is wrong.
func (p *Policy) Validate() error {
	if p.Tool == "" {
		return fmt.Errorf("gate: policy: Tool is required")
	}
	if p.TTL < MinTTL || p.TTL > MaxTTL {
		return fmt.Errorf("gate: policy %s: TTL %s is outside %s..%s", p.Tool, p.TTL, MinTTL, MaxTTL)
	}
	if p.Retention > MaxRetention {
		return fmt.Errorf("gate: policy %s: Retention %s is over %s", p.Tool, p.Retention, MaxRetention)
	}
	if p.InflightTimeout < 0 {
		return fmt.Errorf("gate: policy %s: InflightTimeout must not be negative", p.Tool)
	}
	if p.ReclaimBudget < 0 {
		return fmt.Errorf("gate: policy %s: ReclaimBudget must not be negative", p.Tool)
	}
	if p.DuplicateWindow < 0 || p.DuplicateWindow > MaxDuplicateWindow {
		return fmt.Errorf("gate: policy %s: DuplicateWindow %s is outside 0..%s", p.Tool, p.DuplicateWindow, MaxDuplicateWindow)
	}
	if slices.Contains(p.VolatileFields, ConfirmField) {
		return fmt.Errorf("gate: policy %s: VolatileFields must not name %s", p.Tool, ConfirmField)
	}
	if slices.Contains(p.VolatileFields, "idempotency_key") {
		return fmt.Errorf("gate: policy %s: VolatileFields must not name idempotency_key", p.Tool)
	}
	return nil
}

// retention returns the effective retention.
func (p *Policy) retention() time.Duration {
	switch {
	case p.Retention == 0:
		return DefaultRetention
	case p.Retention < 0:
		return 0
	}
	return p.Retention
}

// reclaimBudget returns the effective reclaim budget.
func (p *Policy) reclaimBudget() int {
	if p.ReclaimBudget == 0 {
		return DefaultReclaimBudget
	}
	return p.ReclaimBudget
}

// RedactResult keeps only the policy's ResultFields of a JSON object. A
// result that is not a JSON object is refused: results are always objects.
func (p *Policy) RedactResult(result json.RawMessage) (json.RawMessage, error) {
	if len(result) == 0 {
		return nil, nil
	}
	return keepFields(result, p.ResultFields)
}

// RedactArgs keeps only the policy's AuditArgFields of decoded arguments.
func (p *Policy) RedactArgs(args map[string]any) map[string]any {
	out := make(map[string]any, len(p.AuditArgFields))
	for _, f := range p.AuditArgFields {
		if v, ok := args[f]; ok {
			out[f] = v
		}
	}
	return out
}

func keepFields(raw json.RawMessage, fields []string) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("gate: result must be a JSON object: %w", err)
	}
	out := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		if v, ok := obj[f]; ok {
			out[f] = v
		}
	}
	return json.Marshal(out)
}
