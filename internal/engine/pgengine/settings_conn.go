package pgengine

// The settings the Postgres driver's messages name; the assembly reads
// them (internal/config) and hands the driver Settings.
const (
	envDatabaseURL    = "DATABASE_URL"
	envDBPooler       = "IDEMGATE_DB_POOLER"
	poolerTransaction = "transaction"
)

// DefaultMaxConns is the connections a process holds to Postgres in all
// when neither Settings.MaxConns nor the URL's pool_max_conns says.
const DefaultMaxConns = 10

// Settings are what the driver needs of the process's configuration.
type Settings struct {
	// URL is the database's URL (DATABASE_URL); its pool_max_conns, when
	// it has one, wins over MaxConns.
	URL string
	// Pooled is true when URL goes through a transaction pooler.
	Pooled bool
	// ExecMode is pgx's query execution mode as a URL names it
	// (default_query_exec_mode); empty: pgx's default.
	ExecMode string
	// MaxConns is how many connections the process may hold to Postgres
	// in all; 0: DefaultMaxConns.
	MaxConns int32
}
