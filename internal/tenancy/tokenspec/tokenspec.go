// Package tokenspec holds the facts about bearer tokens that packages
// tenancy, store and tool need: the scope names a token may grant and the
// shape of a token value.
//
// It exists to break an import cycle: tenancy authenticates against
// store.Tokens (so it imports store), while store validates seed files,
// which grant scopes and may fix token values. Both import this leaf, which
// imports only the standard library and domain; tool re-exports its scope names for
// tool authors. Other code should use the re-exports in package tenancy or
// package tool.
package tokenspec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/domain"
)

// The scopes every deployment knows; each tool declares its own (package
// tool's Registry.Scopes lists them all).
const (
	ScopeOperationsRead  = domain.ScopeOperationsRead
	ScopeOpsAdmin        = domain.ScopeOpsAdmin
	ScopeApprovalsDecide = domain.ScopeApprovalsDecide
)

// scopePattern is a scope's shape: resource:action.
var scopePattern = regexp.MustCompile(`^[a-z][a-z0-9_.-]*:[a-z][a-z0-9_.-]*$`)

// ValidateScopes checks that scopes is non-empty, that every entry is
// known (one of known, the deployment's registry's scopes) or, when known
// is nil, at least shaped like a scope (resource:action), and that none
// repeats. Its messages name the offending entry but not the field:
// callers prefix their own ("--scopes: …").
func ValidateScopes(scopes, known []string) error {
	if len(scopes) == 0 {
		if known == nil {
			return fmt.Errorf("must list at least one scope")
		}
		return fmt.Errorf("must list at least one scope (known: %s)", strings.Join(known, ", "))
	}
	for i, s := range scopes {
		switch {
		case known != nil && !slices.Contains(known, s):
			return fmt.Errorf("unknown scope %q (known: %s)", s, strings.Join(known, ", "))
		case !scopePattern.MatchString(s):
			return fmt.Errorf("scope %q must look like resource:action", s)
		}
		if slices.Contains(scopes[:i], s) {
			return fmt.Errorf("scope %q is listed twice", s)
		}
	}
	return nil
}

// Token value shape. Generated tokens are Prefix followed by 43 characters
// of unpadded base64url (32 random bytes). Fixed values (seed files, tests,
// demos) may be shorter, so the rule that every reader applies is looser:
// Prefix, then MinLen-len(Prefix) to MaxLen-len(Prefix) characters of
// [A-Za-z0-9_-].
const (
	// Prefix starts every token value.
	Prefix = "idg_"
	// MinLen is the shortest well-formed token value, prefix included.
	MinLen = 8
	// MaxLen is the longest well-formed token value, prefix included.
	MaxLen = 256
)

// WellFormed reports whether s has the shape of a token value. It says
// nothing about whether such a token exists.
func WellFormed(s string) bool {
	if len(s) < MinLen || len(s) > MaxLen || !strings.HasPrefix(s, Prefix) {
		return false
	}
	for i := len(Prefix); i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
