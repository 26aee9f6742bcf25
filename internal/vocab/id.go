package vocab

import (
	"regexp"

	"github.com/idemgate/idemgate/domain"
)

// IDPattern is what the ids in tool arguments look like (orders, charges,
// customers and seats), and a caller's X-Request-Id that the api keeps.
// Tenant and user ids follow domain.CheckID instead.
const IDPattern = `^[A-Za-z0-9_.:-]{1,64}$`

// IDRule says IDPattern in words, for messages: "must be " + IDRule.
const IDRule = "1 to 64 characters of [A-Za-z0-9_.:-]"

var idPattern = regexp.MustCompile(IDPattern)

// ValidID reports whether s matches IDPattern.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// IdentityRule says domain.CheckID's rule in words, for messages.
const IdentityRule = "1 to 255 bytes of printable UTF-8, no space at either end"

// IdentityError is a tenant or user id that domain.CheckID refused, as
// an authenticator met it: Field names where it came from ("tenant_id",
// a claim), Reason is CheckID's words. It never holds the id itself.
type IdentityError struct {
	Field  string
	Reason string
}

// Error implements error.
func (e *IdentityError) Error() string { return e.Field + " " + e.Reason }

// CheckIdentity checks a tenant or user id read from field: nil, or an
// *IdentityError.
func CheckIdentity(field, id string) error {
	if err := domain.CheckID(id); err != nil {
		return &IdentityError{Field: field, Reason: err.Error()}
	}
	return nil
}
