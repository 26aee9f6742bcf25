// Package engine is the contract between idemgate and a database engine.
// Each engine is one driver package (pgengine, sqliteengine) that owns its
// SQL, its migrations, its River driver and its transactions.
package engine

// AppTable is the version table of a team's own migrations, apart from
// idemgate's (goose_db_version) so that the two lines never collide.
const AppTable = "app_goose_db_version"

// Result reports what one Migrate call applied.
type Result struct {
	// RiverApplied is the number of River migrations applied by this call.
	RiverApplied int `json:"river_applied"`
	// IdemgateApplied is the number of idemgate (goose) migrations applied by
	// this call.
	IdemgateApplied int `json:"idemgate_applied"`
}
