// Package builtins links idemgate's built-in tools (refund_order,
// apply_credit, reset_seat, send_password_reset, get_order) into a
// program, with their Stripe and SMTP clients and their settings: a program
// that calls Tools serves them, one that does not links neither them nor
// stripe-go nor the mailer.
//
//	cfg, err := idemgate.LoadConfig(os.Args[1:], builtins.Tools())
//	svc, err := idemgate.Open(ctx, cfg, reg, &idemgate.Options{Builtins: builtins.Tools()})
package builtins

import (
	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/internal/builtins"
)

// Tools returns idemgate's built-in tools, for Options.Builtins, and for
// LoadConfig and DefaultConfig, which then read their settings.
func Tools() idemgate.Builtins { return tools{} }

// tools are the built-in tools as idemgate.Builtins.
type tools struct{}

// Link hands the built-ins to the assembly.
func (tools) Link() any { return builtins.Linked() }
