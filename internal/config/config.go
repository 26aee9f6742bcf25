// Package config is the one configuration that every idemgate binary
// (cmd/api, cmd/worker, cmd/idemctl) reads from flags and the environment.
//
// Every setting is one field of Config, described by its struct tags and
// parsed by github.com/alecthomas/kong: `name` (the flag, --name), `env`
// (the environment variable), `default`, `help` and `placeholder` for -h,
// plus three tags of this package: `envonly` (no flag, to keep a secret off
// command lines), `secret` (logged as "set" or "unset", never echoed) and
// `secret:"password"` (a URL logged with its password masked). A flag given
// on the command line overrides the environment, and the environment
// overrides the default. An empty environment variable counts as unset, and
// surrounding whitespace in any value is ignored.
//
// Binaries call Load (cmd/api and cmd/worker through idemgate.LoadConfig);
// idemctl, a kong application of its own, calls Load with the flags it shares. Load
// validates, and Validate can be called again after a caller changes
// fields. Invalid configuration is reported as one *SettingError per bad
// setting (joined with errors.Join), each naming the environment variable,
// its flag and the offending value; secrets are never echoed.
//
// To add a setting, add a field to Config with its name, env, help and
// (if any) default tags; add its checks to Validate if it needs any, and its
// row to README.md's configuration table (a test compares them). Help
// (-h), the logged configuration and error messages follow from the tags.
package config

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"
)

// Config is the configuration shared by every idemgate binary. Build it
// with Load or Defaults; a Config changed by hand should be checked with
// Validate. Each field's tags are its whole definition (see the package
// documentation).
type Config struct {
	// DatabaseURL selects the store: "" is SQLite at DefaultSQLitePath in
	// the current directory; "sqlite:PATH" or "sqlite://PATH" (so
	// "sqlite:///var/lib/idemgate.db" is an absolute path); or a
	// "postgres://" or "postgresql://" URL with a host.
	//
	// A postgres:// URL's pool_max_conns parameter (pgx's own) is the one
	// setting of how many connections this process opens to Postgres: at
	// most that many in all, River's LISTEN and the migration lock
	// included (PoolMaxConns). Without it a process opens at most
	// DefaultPoolMaxConns (idemctl DefaultCLIPoolMaxConns). Nothing
	// overrides it.
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" placeholder:"URL" secret:"password" help:"database: postgres://… or sqlite:PATH; empty means SQLite at idemgate.db in the current directory. A postgres:// URL's pool_max_conns=N bounds this process's connections to Postgres to N in all (default 10 per api or worker process, 3 for idemctl); nothing overrides it"`

	// APIAddr is the host:port cmd/api listens on (port 0 picks a free one).
	APIAddr string `name:"api-addr" env:"IDEMGATE_API_ADDR" default:"127.0.0.1:8080" placeholder:"HOST:PORT" help:"where the api listens (port 0 picks a free one)"`

	// PublicURL is the api's base URL as people reach it: the approval
	// pages idemgate links to (in answers and mails) are
	// PublicURL/approvals/{id}. Empty means PublicURLOrDefault's.
	PublicURL string `name:"public-url" env:"IDEMGATE_PUBLIC_URL" placeholder:"URL" help:"the api's base URL as people reach it (https://idemgate.example.com), for the approval page links in answers and mails; empty: http://<api addr>, 127.0.0.1 standing in for an all-interfaces address"`

	// BuiltinSettings are the built-in tools' settings, read only in a
	// program that links them (EnableBuiltinSettings).
	BuiltinSettings `kong:"-"`

	// InflightTimeout is a worker's lease on a claim: a running claim whose
	// lease expired is reclaimed by the reaper.
	InflightTimeout time.Duration `name:"inflight-timeout" env:"IDEMGATE_INFLIGHT_TIMEOUT" default:"2m" placeholder:"DURATION" help:"a worker's lease on a claim, 1s to 24h"`

	// ReaperInterval is how often the reaper runs; not longer than
	// InflightTimeout.
	ReaperInterval time.Duration `name:"reaper-interval" env:"IDEMGATE_REAPER_INTERVAL" default:"30s" placeholder:"DURATION" help:"how often the reaper reclaims expired leases, 100ms to 1h and at most the in-flight timeout"`

	// River is whose the database's River tables are: "own" (only
	// idemgate's clients) or "shared" (a team's River client works the same
	// database: idemgate's worker then never leads, so that the team's
	// leader enqueues the team's periodic jobs and rescues the team's stuck
	// jobs; idemgate's reaper and pruner run in every worker process
	// instead of as periodic jobs).
	River string `name:"river" env:"IDEMGATE_RIVER" default:"own" placeholder:"own|shared" help:"own: the database's River is idemgate's alone; shared: a team's River client works it too, and idemgate's worker never leads (the team's leader runs periodic jobs and rescues)"`

	// Wait is how long a mutation call waits for a terminal outcome before
	// answering with a handle; 0 answers at once.
	Wait time.Duration `name:"wait" env:"IDEMGATE_WAIT" default:"2s" placeholder:"DURATION" help:"how long a mutation call waits for its outcome before answering with a handle; 0 answers at once"`

	// Secret derives password-reset tokens (workers of the built-in tools
	// call RequireSecret) and keys the intent keys that new claims'
	// downstream keys derive from (the api and the embedded mode warn at
	// start without it: downstream keys then come from random operation
	// ids, which a lost commit forgets). The same on every process.
	Secret string `name:"secret" env:"IDEMGATE_SECRET" envonly:"" secret:"" help:"derives password-reset tokens and keys the downstream keys Stripe and the mailer deduplicate by (set the same on every api and worker): at least 32 bytes, no placeholder, at least 128 bits of entropy (openssl rand -hex 32)"`

	// WorkerAddr is where cmd/worker serves /metrics and /healthz.
	WorkerAddr string `name:"worker-addr" env:"IDEMGATE_WORKER_ADDR" default:"127.0.0.1:9091" placeholder:"HOST:PORT" help:"where the worker serves /metrics and /healthz"`

	// OperatorTenant is the tenant whose ops:admin tokens may open River UI
	// (every tenant's jobs). Its tokens are created only with idemctl token
	// create --operator, never as an ordinary tenant's. In OAuth mode the
	// tenant claim makes no operator (OpsSubjects does): an access token
	// claiming this tenant is refused on /ops unless its sub is listed.
	OperatorTenant string `name:"operator-tenant" env:"IDEMGATE_OPERATOR_TENANT" default:"ops" placeholder:"TENANT" help:"the tenant whose ops:admin tokens may open River UI"`

	// OpsUser and OpsPassword are the operator's HTTP Basic credentials for
	// the api's /ops routes; both unset turns Basic authentication off. The
	// api checks them when it starts (ops.BasicIfSet).
	OpsUser     string `name:"ops-user" env:"IDEMGATE_OPS_USER" envonly:"" help:"HTTP Basic user for /ops (River UI, re-drive); unset with IDEMGATE_OPS_PASSWORD: Basic off"`
	OpsPassword string `name:"ops-password" env:"IDEMGATE_OPS_PASSWORD" envonly:"" secret:"" help:"HTTP Basic password for /ops, at least 12 characters (openssl rand -hex 16)"`

	// RateLimit is the sustained rate of mutation calls per second that the
	// api allows each tenant for each tool (a token bucket per tenant and
	// tool); 0 turns the limit off. Calls over it are refused with
	// rate_limited (REST 429 with Retry-After) before anything is claimed.
	RateLimit float64 `name:"rate-limit" env:"IDEMGATE_RATE_LIMIT" default:"50" placeholder:"PER_SECOND" help:"sustained mutation calls per second per tenant and tool (fractions allowed); 0 turns the limit off"`

	// RateBurst is the bucket's size: how many calls a tenant may make to
	// one tool at once before RateLimit paces them. At least 1 while the
	// limit is on; ignored when RateLimit is 0.
	RateBurst int `name:"rate-burst" env:"IDEMGATE_RATE_BURST" default:"200" placeholder:"CALLS" help:"calls per tenant and tool allowed at once before the sustained rate applies; at least 1 unless the limit is off"`

	// DuplicateWindow is how long the built-in money and mail tools hold a
	// call with the same arguments as a recent operation under another key
	// as a possible duplicate (gate.Policy.DuplicateWindow); 0 turns the
	// guard off.
	DuplicateWindow time.Duration `name:"duplicate-window" env:"IDEMGATE_DUPLICATE_WINDOW" default:"10m" placeholder:"DURATION" help:"how long the built-in money and mail tools hold the same arguments under a new idempotency key as possible_duplicate until the caller confirms a new intent; 0 turns the guard off; at most 24h"`

	// ApprovalsMaxPending caps each tenant's calls awaiting a person's
	// approval: a call that would wait while the tenant already has this
	// many waiting is refused with approvals_pending_limit (REST 429 with
	// Retry-After), nothing claimed, one denied audit row. 0 turns the cap
	// off.
	ApprovalsMaxPending int `name:"approvals-max-pending" env:"IDEMGATE_APPROVALS_MAX_PENDING" default:"50" placeholder:"CALLS" help:"most calls of one tenant awaiting a person's approval at once; further calls that need approval are refused with approvals_pending_limit; 0 turns the cap off"`

	// DBPooler says what DATABASE_URL connects through: PoolerNone (the
	// default: Postgres itself, or a pooler in session mode) or
	// PoolerTransaction (PgBouncer with pool_mode=transaction, or any pooler
	// that hands a server connection out per transaction). With
	// PoolerTransaction nothing relies on a session: River polls for jobs
	// instead of LISTENing (river.Config.PollOnly) and pgx keeps no named
	// prepared statements
	// (DefaultPooledExecMode) unless DATABASE_URL's default_query_exec_mode
	// names a mode (cache_statement only for a pooler that keeps prepared
	// statements, such as PgBouncer 1.21+ with max_prepared_statements).
	DBPooler string `name:"db-pooler" env:"IDEMGATE_DB_POOLER" default:"none" placeholder:"MODE" help:"what DATABASE_URL connects through: none (Postgres, or a session pooler) or transaction (PgBouncer pool_mode=transaction: River polls, no prepared statements)"`

	// AllowedOrigins are the origins (scheme://host[:port], comma-separated)
	// from which a browser page may call the api's /mcp and REST routes
	// (Origins): a request whose Origin header is another is refused with
	// 403; a request without Origin (a non-browser client) is served.
	// Empty: only the api's own origin (the one whose host and port are the
	// request's Host header) and none other.
	AllowedOrigins string `name:"allowed-origins" env:"IDEMGATE_ALLOWED_ORIGINS" placeholder:"ORIGINS" help:"comma-separated origins (scheme://host[:port]) whose browser pages may call /mcp and /v1; any other Origin header is refused with 403, requests without Origin are served; empty: the api's own origin only"`

	// OAuthIssuer turns on the OAuth 2.1 resource-server mode: every route
	// takes JWT access tokens of this authorization server (its discovery
	// gives the keys), instead of idemgate's own tokens. Empty: off.
	OAuthIssuer string `name:"oauth-issuer" env:"IDEMGATE_OAUTH_ISSUER" placeholder:"URL" help:"OAuth 2.1 resource-server mode: the authorization server's issuer URL, whose JWT access tokens every route then takes instead of idemgate's own tokens; empty: off"`
	// OAuthAudience is the aud an access token must carry (required with
	// OAuthIssuer): usually the MCP endpoint's URL.
	OAuthAudience string `name:"oauth-audience" env:"IDEMGATE_OAUTH_AUDIENCE" placeholder:"URI" help:"the aud access tokens must carry, usually this api's MCP URL (required with IDEMGATE_OAUTH_ISSUER)"`
	// OAuthResource is the resource identifier published in the RFC 9728
	// metadata and the 401's resource_metadata; default OAuthAudience.
	OAuthResource string `name:"oauth-resource" env:"IDEMGATE_OAUTH_RESOURCE" placeholder:"URL" help:"this api's resource identifier (an https URL) in its protected-resource metadata (RFC 9728); empty: IDEMGATE_OAUTH_AUDIENCE"`
	// OAuthTenantClaim, OAuthUserClaim and OAuthScopesClaim name the token
	// claims that hold the tenant, the user and the scopes; empty: tenant,
	// sub and scope.
	OAuthTenantClaim string `name:"oauth-tenant-claim" env:"IDEMGATE_OAUTH_TENANT_CLAIM" placeholder:"CLAIM" help:"the access token claim that holds the tenant id; empty: tenant"`
	OAuthUserClaim   string `name:"oauth-user-claim" env:"IDEMGATE_OAUTH_USER_CLAIM" placeholder:"CLAIM" help:"the access token claim that holds the user id; empty: sub"`
	OAuthScopesClaim string `name:"oauth-scopes-claim" env:"IDEMGATE_OAUTH_SCOPES_CLAIM" placeholder:"CLAIM" help:"the access token claim that holds the scopes (a space-separated string or an array); empty: scope"`
	// OpsSubjects are the operators of OAuth mode: a comma-separated list
	// of access token subjects (sub, exactly as the issuer writes it), each
	// bare or qualified with the issuer as ISSUER#SUB. An access token with
	// scope ops:admin whose sub is listed is a deployment operator (River UI,
	// re-drives of every tenant); the tenant claim never makes one, and a
	// token whose tenant claim is OperatorTenant but whose sub is not
	// listed is refused on /ops. Only with OAuthIssuer; empty: no OAuth
	// operators (the Basic credentials remain).
	OpsSubjects string `name:"ops-subjects" env:"IDEMGATE_OPS_SUBJECTS" placeholder:"SUBJECTS" help:"OAuth mode's operators: comma-separated access token subjects (sub), each bare or as ISSUER#SUB; an ops:admin token of a listed sub opens River UI and re-drives any tenant, the tenant claim never makes an operator; empty: none"`

	// LogLevel is the minimum level logged: debug, info, warn or error
	// (case-insensitive).
	LogLevel slog.Level `name:"log-level" env:"IDEMGATE_LOG_LEVEL" default:"info" placeholder:"LEVEL" help:"minimum log level: debug, info, warn or error"`
}

// BuiltinSettings are the settings of idemgate's built-in tools (Stripe,
// SMTP, reset links). Load reads them only when the program links the
// built-ins, whose package calls EnableBuiltinSettings: a service without
// them has no such settings (no flag, no help line, no check).
type BuiltinSettings struct {
	// StripeAPIKey authenticates refunds against Stripe.
	StripeAPIKey string `name:"stripe-api-key" env:"STRIPE_API_KEY" placeholder:"KEY" secret:"" help:"Stripe secret key (prefer the environment: command lines are visible to other users)"`

	// StripeAPIBase is the base URL of Stripe's API, e.g. stripe-mock's
	// "http://127.0.0.1:12111": an absolute http(s) URL without query or
	// fragment; a trailing slash is removed when loaded.
	StripeAPIBase string `name:"stripe-api-base" env:"STRIPE_API_BASE" default:"https://api.stripe.com" placeholder:"URL" help:"base URL of Stripe's API (stripe-mock in dev and tests); plain http only with a test key"`

	// SMTPAddr is the host:port of the SMTP server for password-reset
	// mails and approval notices.
	SMTPAddr string `name:"smtp-addr" env:"SMTP_ADDR" default:"127.0.0.1:1025" placeholder:"HOST:PORT" help:"SMTP server for password-reset mails and approval notices"`

	// MailFrom is the From address of outgoing mail, in net/mail syntax.
	MailFrom string `name:"mail-from" env:"MAIL_FROM" default:"idemgate <no-reply@localhost>" placeholder:"ADDRESS" help:"From address of outgoing mail"`

	// ResetLinkBase is the page password-reset mails link to, as
	// ResetLinkBase?token=… (vocab.CheckLinkBase); a tenant's own base
	// (tenant_settings.reset_link_base) wins over it. Empty means
	// ResetLinkBaseOrDefault's.
	ResetLinkBase string `name:"reset-link-base" env:"IDEMGATE_RESET_LINK_BASE" placeholder:"URL" help:"absolute http(s) URL of the page password-reset mails link to (URL?token=…); empty: http://<api addr>/reset-password, 127.0.0.1 standing in for an all-interfaces address"`

	// StripeWebhookSecrets are the signing secrets (whsec_…,
	// comma-separated) of the Stripe webhook endpoint POST
	// /v1/webhooks/stripe: an event signed with any of them is accepted,
	// so that a secret can be rolled (both listed until Stripe stops
	// signing with the old one). Empty: the endpoint is not served.
	StripeWebhookSecrets string `name:"stripe-webhook-secrets" env:"IDEMGATE_STRIPE_WEBHOOK_SECRETS" envonly:"" secret:"" placeholder:"SECRETS" help:"signing secrets (whsec_…, comma-separated while one is rolled) of the Stripe webhook endpoint POST /v1/webhooks/stripe; empty: the endpoint is not served"`
}

// WebhookSecrets returns StripeWebhookSecrets as a list, without blanks.
func (b *BuiltinSettings) WebhookSecrets() []string {
	var out []string
	for _, s := range strings.Split(b.StripeWebhookSecrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// builtinSettings is whether Load reads BuiltinSettings.
var builtinSettings atomic.Bool

// EnableBuiltinSettings makes Load read BuiltinSettings. The built-in
// tools' package calls it when it is linked, before main runs.
func EnableBuiltinSettings() { builtinSettings.Store(true) }

// BuiltinSettingsEnabled reports whether Load reads BuiltinSettings.
func BuiltinSettingsEnabled() bool { return builtinSettings.Load() }

// The values of River.
const (
	// RiverOwn: the database's River is idemgate's alone.
	RiverOwn = "own"
	// RiverShared: a team's River client works the same database.
	RiverShared = "shared"
)

// Environment variables of the settings that other packages and the
// checks name. Every setting's variable is its field's env tag.
const (
	EnvDatabaseURL   = "DATABASE_URL"
	EnvOAuthIssuer   = "IDEMGATE_OAUTH_ISSUER"
	EnvOAuthAudience = "IDEMGATE_OAUTH_AUDIENCE"
	EnvAPIAddr       = "IDEMGATE_API_ADDR"
	EnvPublicURL     = "IDEMGATE_PUBLIC_URL"
	EnvStripeAPIKey  = "STRIPE_API_KEY"
	EnvStripeAPIBase = "STRIPE_API_BASE"
	EnvSMTPAddr      = "SMTP_ADDR"
	EnvMailFrom      = "MAIL_FROM"
	EnvResetLinkBase = "IDEMGATE_RESET_LINK_BASE"
	// EnvStripeWebhookSecrets names BuiltinSettings.StripeWebhookSecrets.
	EnvStripeWebhookSecrets = "IDEMGATE_STRIPE_WEBHOOK_SECRETS"
	EnvInflightTimeout      = "IDEMGATE_INFLIGHT_TIMEOUT"
	EnvReaperInterval       = "IDEMGATE_REAPER_INTERVAL"
	EnvRiver                = "IDEMGATE_RIVER"
	EnvWait                 = "IDEMGATE_WAIT"
	EnvSecret               = "IDEMGATE_SECRET"
	EnvLogLevel             = "IDEMGATE_LOG_LEVEL"
	EnvWorkerAddr           = "IDEMGATE_WORKER_ADDR"
	EnvOperatorTenant       = "IDEMGATE_OPERATOR_TENANT"
	EnvOpsSubjects          = "IDEMGATE_OPS_SUBJECTS"
	EnvRateLimit            = "IDEMGATE_RATE_LIMIT"
	EnvRateBurst            = "IDEMGATE_RATE_BURST"
	// EnvApprovalsMaxPending names Config.ApprovalsMaxPending.
	EnvApprovalsMaxPending = "IDEMGATE_APPROVALS_MAX_PENDING"
	// EnvDuplicateWindow names Config.DuplicateWindow.
	EnvDuplicateWindow = "IDEMGATE_DUPLICATE_WINDOW"
	EnvDBPooler        = "IDEMGATE_DB_POOLER"
	EnvAllowedOrigins  = "IDEMGATE_ALLOWED_ORIGINS"
)

// Defaults as constants, for packages that need one without a Config. The
// default tags are the source; a test checks that these agree with them.
const (
	DefaultAPIAddr         = "127.0.0.1:8080"
	DefaultStripeAPIBase   = "https://api.stripe.com"
	DefaultSMTPAddr        = "127.0.0.1:1025"
	DefaultMailFrom        = "idemgate <no-reply@localhost>"
	DefaultInflightTimeout = 2 * time.Minute
	DefaultReaperInterval  = 30 * time.Second
	DefaultRiver           = RiverOwn
	DefaultWait            = 2 * time.Second
	DefaultOperatorTenant  = "ops"
	DefaultWorkerAddr      = "127.0.0.1:9091"
	DefaultLogLevel        = slog.LevelInfo
	DefaultRateLimit       = 50
	DefaultRateBurst       = 200
	// DefaultApprovalsMaxPending is Config.ApprovalsMaxPending's default.
	DefaultApprovalsMaxPending = 50
	// DefaultDuplicateWindow is Config.DuplicateWindow's default.
	DefaultDuplicateWindow = 10 * time.Minute
	DefaultDBPooler        = PoolerNone
	// DefaultPooledExecMode is the pgx query execution mode used under
	// PoolerTransaction when DATABASE_URL names none: statement
	// descriptions are cached per connection, the statements themselves are
	// unnamed, so any server connection can run them.
	DefaultPooledExecMode = "cache_describe"
	// DefaultPoolMaxConns bounds the connections an api or worker process
	// opens to Postgres when DATABASE_URL has no pool_max_conns: an api and
	// two workers (the quickstart on Postgres) hold at most 30 of a stock
	// server's 100.
	DefaultPoolMaxConns = 10
	// DefaultCLIPoolMaxConns is DefaultPoolMaxConns for idemctl, which
	// runs one command at a time.
	DefaultCLIPoolMaxConns = 3
	// DefaultSQLitePath is the SQLite file used when DATABASE_URL is empty,
	// relative to the current directory.
	DefaultSQLitePath = "idemgate.db"
)

// Bounds checked by Validate.
const (
	MinInflightTimeout = time.Second
	MaxInflightTimeout = 24 * time.Hour
	MinReaperInterval  = 100 * time.Millisecond
	MaxReaperInterval  = time.Hour
	// MinSecretLen is the minimum length of IDEMGATE_SECRET in bytes. The
	// value is used as given (hex or raw): only its length is checked.
	MinSecretLen = 32
	// MaxRateLimit and MaxRateBurst bound the rate limit's settings: far
	// above what one api serves, low enough to catch a slipped digit.
	MaxRateLimit = 1_000_000
	MaxRateBurst = 1_000_000
	// MaxApprovalsMaxPending bounds IDEMGATE_APPROVALS_MAX_PENDING: more
	// waiting calls than people can read.
	MaxApprovalsMaxPending = 100_000
	// MaxPoolMaxConns bounds DATABASE_URL's pool_max_conns: far above any
	// server's max_connections, low enough to catch a slipped digit.
	MaxPoolMaxConns = 10_000
)

// URLPoolMaxConns is the DATABASE_URL parameter (pgx's) that bounds a
// process's connections to Postgres (see Config.PoolMaxConns).
const URLPoolMaxConns = "pool_max_conns"

// Poolers of Config.DBPooler.
const (
	PoolerNone        = "none"
	PoolerTransaction = "transaction"
)

// Database drivers returned by Config.Driver.
const (
	DriverPostgres = "postgres"
	DriverSQLite   = "sqlite"
)

// ErrHelp is returned by Load for -h or --help, after the help is printed;
// a binary exits 0 on it.
var ErrHelp = errors.New("help requested")

// Load reads the configuration: args are the command-line arguments without
// the program name, getenv is usually os.Getenv. Flags override the
// environment, which overrides the defaults; the result is validated.
// Positional arguments are an error. For -h or --help, Load prints every
// setting with its flag, environment variable and default to standard
// output and returns ErrHelp.
func Load(args []string, getenv func(string) string) (*Config, error) {
	return load(args, getenv, nil)
}

// Defaults returns a Config holding every default (the default tags).
func Defaults() *Config {
	c, err := load(nil, nil, nil)
	if err != nil {
		panic("config: the default tags do not parse: " + err.Error())
	}
	// The built-in tools' defaults too, whether or not Load reads their
	// settings: a configuration written in code may serve them.
	if c.StripeAPIBase == "" && c.SMTPAddr == "" && c.MailFrom == "" {
		c.StripeAPIBase, c.SMTPAddr, c.MailFrom = DefaultStripeAPIBase, DefaultSMTPAddr, DefaultMailFrom
	}
	return c
}

// Origins returns AllowedOrigins as a list, each entry trimmed; nil when
// it is empty.
func (c *Config) Origins() []string {
	var out []string
	for _, o := range strings.Split(c.AllowedOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// Driver returns DriverPostgres for a postgres:// or postgresql:// URL and
// DriverSQLite otherwise.
func (c *Config) Driver() string {
	if isPostgresURL(c.DatabaseURL) {
		return DriverPostgres
	}
	return DriverSQLite
}

// Pooled reports whether DATABASE_URL goes through a transaction pooler
// (DBPooler is PoolerTransaction), so that no session state may be relied
// on.
func (c *Config) Pooled() bool { return c.DBPooler == PoolerTransaction }

// PostgresExecMode returns the pgx query execution mode for DATABASE_URL:
// its default_query_exec_mode parameter, or under PoolerTransaction
// DefaultPooledExecMode when it names none, or "" (pgx's default,
// cache_statement).
func (c *Config) PostgresExecMode() string {
	if m := urlExecMode(c.DatabaseURL); m != "" {
		return m
	}
	if c.Pooled() {
		return DefaultPooledExecMode
	}
	return ""
}

// PoolMaxConns returns how many connections to Postgres this process may
// hold in all: DATABASE_URL's pool_max_conns when it has one (it always
// wins), else def. Zero for SQLite.
func (c *Config) PoolMaxConns(def int32) int32 {
	if c.Driver() != DriverPostgres {
		return 0
	}
	if n, ok := urlPoolMaxConns(c.DatabaseURL); ok {
		return n
	}
	return def
}

// SQLitePath returns the SQLite file to open: DefaultSQLitePath for an
// empty DatabaseURL, PATH for "sqlite://PATH" or "sqlite:PATH". It returns
// "" when the driver is Postgres.
func (c *Config) SQLitePath() string {
	if c.DatabaseURL == "" {
		return DefaultSQLitePath
	}
	path, _ := sqlitePath(c.DatabaseURL)
	return path
}

// ResetLinkBaseOrDefault returns ResetLinkBase, or when it is empty the
// api's own page: PublicURLOrDefault() + "/reset-password".
func (c *Config) ResetLinkBaseOrDefault() string {
	if c.ResetLinkBase != "" {
		return c.ResetLinkBase
	}
	return c.PublicURLOrDefault() + "/reset-password"
}

// PublicURLOrDefault returns PublicURL without a trailing slash, or when it
// is empty http://<api addr>, with 127.0.0.1 for an empty or
// all-interfaces host (0.0.0.0, [::]), which no browser can open.
func (c *Config) PublicURLOrDefault() string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	host, port, err := net.SplitHostPort(c.APIAddr)
	if err != nil {
		return "http://" + c.APIAddr // Validate reports the address
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// RequireSecret returns an error naming IDEMGATE_SECRET when it is empty.
// Binaries that send password-reset mail call it after loading.
func (c *Config) RequireSecret() error {
	if c.Secret == "" {
		return settingErr(EnvSecret, "is required (it derives password-reset tokens and keys the downstream keys); "+
			"generate one with: openssl rand -hex 32")
	}
	return nil
}
