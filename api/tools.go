package api

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// Limits on argument values.
const (
	// MaxAmountCents is the largest amount any tool accepts (ten million in
	// the currency's major unit).
	MaxAmountCents = 1_000_000_000
	// MaxTextLen is the longest free-text argument (reason, memo), in runes.
	MaxTextLen = 500
)

// idPattern is what order, customer, seat and user ids look like.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// currencyPattern is an ISO 4217 code in Stripe's lowercase form.
var currencyPattern = regexp.MustCompile(`^[a-z]{3}$`)

// Scopes of the tools and routes.
const (
	ScopeBillingRefund      = "billing:refund"
	ScopeBillingCredit      = "billing:credit"
	ScopeSeatsReset         = "seats:reset"
	ScopeUsersPasswordReset = "users:password_reset"
	ScopeOperationsRead     = "operations:read"
	ScopeOpsAdmin           = "ops:admin"
)

// fieldKind is the type of a tool argument.
type fieldKind int

const (
	kindID fieldKind = iota
	kindAmount
	kindCurrency
	kindText
	kindToolName
	kindKey
)

type field struct {
	name     string
	kind     fieldKind
	required bool
	desc     string
}

// toolDef is one MCP tool and its REST twin.
type toolDef struct {
	name        string
	title       string
	description string
	scope       string
	mutating    bool
	fields      []field
}

var keyField = field{name: "idempotency_key", kind: kindKey, required: true,
	desc: "Client-chosen key, 8 to 128 characters of [A-Za-z0-9._:-]. Retrying with the same key and arguments returns the first outcome; never reuse a key for another intent."}

var toolDefs = []toolDef{
	{
		name: "refund_order", title: "Refund an order", scope: ScopeBillingRefund, mutating: true,
		description: "Refund part or all of an order's charge through Stripe, exactly once per idempotency_key.",
		fields: []field{
			{name: "order_id", kind: kindID, required: true, desc: "The order to refund."},
			{name: "amount_cents", kind: kindAmount, required: true, desc: "Amount to refund, in the order currency's minor unit; at most what is still refundable."},
			{name: "reason", kind: kindText, desc: "Free-text reason, kept for the record; changing it on a retry is not a conflict."},
			keyField,
		},
	},
	{
		name: "apply_credit", title: "Apply account credit", scope: ScopeBillingCredit, mutating: true,
		description: "Add a credit to a customer's ledger, exactly once per idempotency_key.",
		fields: []field{
			{name: "customer_id", kind: kindID, required: true, desc: "The customer to credit."},
			{name: "amount_cents", kind: kindAmount, required: true, desc: "Credit amount in the currency's minor unit."},
			{name: "currency", kind: kindCurrency, required: true, desc: "ISO 4217 code in lowercase, such as usd; must be the customer's currency."},
			{name: "memo", kind: kindText, desc: "Free-text memo; changing it on a retry is not a conflict."},
			keyField,
		},
	},
	{
		name: "reset_seat", title: "Reset a seat", scope: ScopeSeatsReset, mutating: true,
		description: "Free a license seat from its current user, exactly once per idempotency_key.",
		fields: []field{
			{name: "seat_id", kind: kindID, required: true, desc: "The seat to reset."},
			keyField,
		},
	},
	{
		name: "send_password_reset", title: "Send a password-reset mail", scope: ScopeUsersPasswordReset, mutating: true,
		description: "Mail a password-reset link to a user, once per idempotency_key (a resent mail carries the same link).",
		fields: []field{
			{name: "user_id", kind: kindID, required: true, desc: "The user to mail."},
			keyField,
		},
	},
	{
		name: "get_operation", title: "Get an operation by key", scope: ScopeOperationsRead,
		description: "The status and outcome of a mutation, by its tool and idempotency_key.",
		fields: []field{
			{name: "tool", kind: kindToolName, required: true, desc: "The mutating tool the key was used with."},
			{name: "idempotency_key", kind: kindKey, required: true, desc: "The key the mutation was called with."},
		},
	},
	{
		name: "get_order", title: "Get an order", scope: ScopeOperationsRead,
		description: "An order with its charged and refunded amounts.",
		fields: []field{
			{name: "order_id", kind: kindID, required: true, desc: "The order."},
			{name: "idempotency_key", kind: kindText, desc: "Accepted and ignored: reads are naturally idempotent."},
		},
	},
}

// inputSchema is the JSON Schema published for a tool.
func (d *toolDef) inputSchema() json.RawMessage {
	props := map[string]any{}
	required := []string{}
	for _, f := range d.fields {
		var p map[string]any
		switch f.kind {
		case kindID:
			p = map[string]any{"type": "string", "pattern": idPattern.String()}
		case kindAmount:
			p = map[string]any{"type": "integer", "minimum": 1, "maximum": MaxAmountCents}
		case kindCurrency:
			p = map[string]any{"type": "string", "pattern": currencyPattern.String()}
		case kindText:
			p = map[string]any{"type": "string", "maxLength": MaxTextLen}
		case kindToolName:
			names := []string{}
			for _, t := range toolDefs {
				if t.mutating {
					names = append(names, t.name)
				}
			}
			p = map[string]any{"type": "string", "enum": names}
		case kindKey:
			p = map[string]any{"type": "string", "minLength": gate.KeyMinLen, "maxLength": gate.KeyMaxLen, "pattern": "^[A-Za-z0-9._:-]+$"}
		}
		p["description"] = f.desc
		props[f.name] = p
		if f.required {
			required = append(required, f.name)
		}
	}
	b, err := json.Marshal(map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	})
	if err != nil {
		panic(err) // static data
	}
	return b
}

// annotations are the MCP hints of a tool.
func (d *toolDef) annotations() *mcp.ToolAnnotations {
	if !d.mutating {
		return &mcp.ToolAnnotations{Title: d.title, ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
	}
	return &mcp.ToolAnnotations{Title: d.title, DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(true)}
}

func ptr[T any](v T) *T { return &v }

// validate checks decoded arguments against the tool's fields: unknown
// arguments, required ones, types and ranges. The idempotency key's own
// rules are the gate's (gate.ValidateKey), so that its codes are specific.
func (d *toolDef) validate(args map[string]any) error {
	known := map[string]field{}
	for _, f := range d.fields {
		known[f.name] = f
	}
	unknown := []string{}
	for name := range args {
		if _, ok := known[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return domain.Errorf(domain.CodeInvalidArgument, unknown[0], "unknown argument (this tool takes %s)", d.fieldNames())
	}
	for _, f := range d.fields {
		v, present := args[f.name]
		if !present {
			if f.required && f.kind != kindKey {
				return domain.Errorf(domain.CodeInvalidArgument, f.name, "is required")
			}
			continue
		}
		if err := checkField(f, v); err != nil {
			return err
		}
	}
	return nil
}

func (d *toolDef) fieldNames() string {
	s := ""
	for i, f := range d.fields {
		if i > 0 {
			s += ", "
		}
		s += f.name
	}
	return s
}

func checkField(f field, v any) error {
	switch f.kind {
	case kindKey:
		// A string is checked by the gate with its own codes.
		if _, ok := v.(string); !ok {
			return domain.Errorf(domain.CodeInvalidIdempotencyKey, f.name, "must be a string")
		}
	case kindAmount:
		n, ok := v.(json.Number)
		if !ok {
			return domain.Errorf(domain.CodeInvalidArgument, f.name, "must be an integer number of minor units")
		}
		i, err := n.Int64()
		if err != nil {
			fl, ferr := n.Float64()
			if ferr != nil || fl != math.Trunc(fl) || math.Abs(fl) > MaxAmountCents*10 {
				return domain.Errorf(domain.CodeInvalidArgument, f.name, "must be an integer number of minor units, got %s", n)
			}
			i = int64(fl)
		}
		if i <= 0 {
			return domain.Errorf(domain.CodeInvalidArgument, f.name, "must be positive, got %d", i)
		}
		if i > MaxAmountCents {
			return domain.Errorf(domain.CodeInvalidArgument, f.name, "must be at most %d, got %d", MaxAmountCents, i)
		}
	default:
		s, ok := v.(string)
		if !ok {
			return domain.Errorf(domain.CodeInvalidArgument, f.name, "must be a string")
		}
		switch f.kind {
		case kindID:
			if !idPattern.MatchString(s) {
				return domain.Errorf(domain.CodeInvalidArgument, f.name, "must be 1 to 64 characters of [A-Za-z0-9_.:-]")
			}
		case kindCurrency:
			if !currencyPattern.MatchString(s) {
				return domain.Errorf(domain.CodeInvalidArgument, f.name, "must be a lowercase ISO 4217 code such as usd, got %q", s)
			}
		case kindText:
			if utf8.RuneCountInString(s) > MaxTextLen {
				return domain.Errorf(domain.CodeInvalidArgument, f.name, "must be at most %d characters", MaxTextLen)
			}
			// Postgres refuses U+0000 in text and jsonb: the claim could not
			// be stored.
			if strings.IndexByte(s, 0) >= 0 {
				return domain.Errorf(domain.CodeInvalidArgument, f.name, "must not contain NUL (U+0000)")
			}
		case kindToolName:
			if def, ok := toolByName(s); !ok || !def.mutating {
				return domain.Errorf(domain.CodeInvalidArgument, f.name, "must name a mutating tool, got %q", s)
			}
		}
	}
	return nil
}

func toolByName(name string) (*toolDef, bool) {
	for i := range toolDefs {
		if toolDefs[i].name == name {
			return &toolDefs[i], true
		}
	}
	return nil, false
}

// checkPolicies refuses to start when a mutating tool has no gate policy:
// nothing mutates outside the gate.
func checkPolicies(g *gate.Gate, defs []toolDef) error {
	for _, def := range defs {
		if !def.mutating {
			continue
		}
		if _, ok := g.Policy(def.name); !ok {
			return fmt.Errorf("api: mutating tool %q has no gate policy; refusing to start", def.name)
		}
	}
	return nil
}
