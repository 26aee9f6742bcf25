package domain

import (
	"context"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The scopes every deployment knows besides its tools' own.
const (
	// ScopeOperationsRead lets a caller read its tenant's operations
	// (get_operation, list_operations).
	ScopeOperationsRead = "operations:read"
	// ScopeOpsAdmin is the operators' scope: the River UI and re-drives.
	ScopeOpsAdmin = "ops:admin"
	// ScopeApprovalsDecide lets a person approve or deny the calls of
	// their tenant that wait for approval (never their own).
	ScopeApprovalsDecide = "approvals:decide"
)

// Caller is who calls: the tenant and user a request authenticated as,
// and the scopes it holds. A read tool's Handle gets it, an authenticator
// returns it, and CallerFromContext reads it in a team's own handlers.
type Caller struct {
	TenantID string
	UserID   string
	Scopes   []string
}

// callerKey is the context key of the caller.
type callerKey struct{}

// ContextWithCaller returns ctx carrying c.
func ContextWithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFromContext returns the caller of an authenticated request: the
// REST and MCP authentication put it in the request's context, so a
// team's own handlers and MCP tools served beside idemgate's read it.
func CallerFromContext(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// maxIDLen is the longest tenant or user id, in bytes.
const maxIDLen = 255

// CheckID checks a tenant or user id as identity providers issue them
// ("auth0|64f1c2", "ann@example.com", a UUID, a name in any script): 1 to 255
// bytes of valid UTF-8, every character printable (letters,
// marks, numbers, punctuation, symbols and the ASCII space; no control,
// format or separator characters other than that space), and no space at
// either end. The error says which rule s breaks, without quoting it.
func CheckID(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > maxIDLen:
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(s), maxIDLen)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("has the unprintable character %U at byte %d", r, i)
		}
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return errors.New("begins or ends with a space")
	}
	return nil
}
