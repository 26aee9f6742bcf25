package pgengine

// The hot lookups' statements, for plan_test.go, an external test because
// pgtest imports this package.
var (
	SQLClaimGetByKey       = sqlClaimGetByKey
	SQLClaimGetByOperation = sqlClaimGetByOperation
	SQLClaimListNewest     = sqlClaimListNewest
)
