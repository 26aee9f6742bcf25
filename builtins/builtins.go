// Package builtins links idemgate's built-in tools (refund_order,
// apply_credit, reset_seat, send_password_reset, get_order) into a
// program, with their Stripe and SMTP clients and their settings, the way
// a database/sql driver is linked: import it for its side effect, then
// open the Service with Options.Builtins.
//
//	import _ "github.com/idemgate/idemgate/builtins"
//
//	svc, err := idemgate.Open(ctx, cfg, reg, &idemgate.Options{Builtins: true})
//
// A program that does not import it links neither the built-ins nor
// stripe-go nor the mailer, and its configuration has no Stripe or SMTP
// settings.
package builtins

import _ "github.com/idemgate/idemgate/internal/builtins" // registers the built-ins with the assembly
