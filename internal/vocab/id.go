package vocab

import "regexp"

// IDPattern is what ids look like: tenants, users, orders, charges,
// customers and seats (and a caller's X-Request-Id that the api keeps).
const IDPattern = `^[A-Za-z0-9_.:-]{1,64}$`

// IDRule says IDPattern in words, for messages: "must be " + IDRule.
const IDRule = "1 to 64 characters of [A-Za-z0-9_.:-]"

var idPattern = regexp.MustCompile(IDPattern)

// ValidID reports whether s matches IDPattern.
func ValidID(s string) bool { return idPattern.MatchString(s) }
