package idemgate

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
)

// Config is a Service's configuration. LoadConfig fills it from flags and
// the environment; a program may as well write it in code, starting from
// DefaultConfig, without any environment variable. Open checks it: each
// invalid field is an error naming it (and the variable and flag that set
// it). docs/configuration.md describes every setting.
//
// The zero value is not the defaults (a zero Wait answers at once, a zero
// RateLimit turns the limit off): start from DefaultConfig.
type Config struct {
	// DatabaseURL selects the store: "" is SQLite at idemgate.db in the
	// current directory; "sqlite:PATH"; or a "postgres://" URL, whose
	// pool_max_conns bounds the process's connections (default 10).
	// Ignored with Options.Pool or Options.DB but for its engine, which
	// must agree. Default "". ($DATABASE_URL, --database-url)
	DatabaseURL string
	// APIAddr is where ServeAPI and RunAll listen (port 0 picks a free
	// one). Default "127.0.0.1:8080". ($IDEMGATE_API_ADDR)
	APIAddr string
	// PublicURL is the api's base URL as people reach it, for the approval
	// pages' links. Default "": http://<APIAddr>. ($IDEMGATE_PUBLIC_URL)
	PublicURL string

	// StripeAPIKey is the built-in refunds' Stripe key. Default "".
	// ($STRIPE_API_KEY; read only where package builtins is linked, as
	// are the four settings below)
	StripeAPIKey string
	// StripeAPIBase is Stripe's base URL (stripe-mock in tests); plain
	// http only with a test key. Default "https://api.stripe.com".
	// ($STRIPE_API_BASE)
	StripeAPIBase string
	// SMTPAddr is the SMTP server (host:port) of password-reset mails and
	// approval notices. Default "127.0.0.1:1025". ($SMTP_ADDR)
	SMTPAddr string
	// MailFrom is the From address of outgoing mail. Default
	// "idemgate <no-reply@localhost>". ($MAIL_FROM)
	MailFrom string
	// ResetLinkBase is the page password-reset mails link to. Default "":
	// http://<APIAddr>/reset-password. ($IDEMGATE_RESET_LINK_BASE)
	ResetLinkBase string
	// StripeWebhookSecrets are the signing secrets (whsec_…,
	// comma-separated while one is rolled) of the Stripe webhook endpoint
	// POST /v1/webhooks/stripe. Default "": the endpoint is not served.
	// ($IDEMGATE_STRIPE_WEBHOOK_SECRETS)
	StripeWebhookSecrets string

	// InflightTimeout is a worker's lease on a claim, 1s to 24h. Default
	// 2m. ($IDEMGATE_INFLIGHT_TIMEOUT)
	InflightTimeout time.Duration
	// ReaperInterval is how often expired leases are reclaimed, 100ms to
	// 1h and at most InflightTimeout. Default 30s.
	// ($IDEMGATE_REAPER_INTERVAL)
	ReaperInterval time.Duration
	// River is "own" (the database's River is idemgate's alone) or
	// "shared" (a team's River client works it too: idemgate's worker
	// never leads, and its reaper and pruner run in every worker process).
	// Default "own". ($IDEMGATE_RIVER)
	River string
	// Wait is how long a mutation call waits for its outcome before
	// answering with a handle; 0 answers at once. Default 2s.
	// ($IDEMGATE_WAIT)
	Wait time.Duration
	// Secret keys the downstream keys and derives password-reset tokens:
	// at least 32 bytes of high entropy, the same in every process.
	// Default "" (a warning at start). ($IDEMGATE_SECRET)
	Secret string
	// WorkerAddr is where RunWorker serves /metrics and /healthz. Default
	// "127.0.0.1:9091". ($IDEMGATE_WORKER_ADDR)
	WorkerAddr string
	// OperatorTenant is the tenant whose ops:admin tokens (idemctl token
	// create --operator) open River UI; in OAuth mode a token claiming it
	// is refused on /ops unless OpsSubjects lists its subject. Default
	// "ops". ($IDEMGATE_OPERATOR_TENANT)
	OperatorTenant string
	// OpsUser and OpsPassword are HTTP Basic credentials for /ops; both
	// empty turns Basic off. Default "". ($IDEMGATE_OPS_USER,
	// $IDEMGATE_OPS_PASSWORD)
	OpsUser     string
	OpsPassword string
	// RateLimit is the sustained mutation calls per second per tenant and
	// tool; 0 turns the limit off. Default 50. ($IDEMGATE_RATE_LIMIT)
	RateLimit float64
	// RateBurst is how many calls per tenant and tool may come at once.
	// Default 200. ($IDEMGATE_RATE_BURST)
	RateBurst int
	// ApprovalsMaxPending is the most calls of one tenant awaiting a
	// person's approval at once; a further call that needs approval is
	// refused with approvals_pending_limit. 0 turns the cap off. Default
	// 50. ($IDEMGATE_APPROVALS_MAX_PENDING)
	ApprovalsMaxPending int
	// DuplicateWindow is how long the built-in money and mail tools hold
	// the same arguments under a new idempotency key as possible_duplicate
	// until the caller confirms a new intent; 0 turns the guard off.
	// Default 10m. ($IDEMGATE_DUPLICATE_WINDOW)
	DuplicateWindow time.Duration
	// DBPooler is "none" or "transaction" (PgBouncer in transaction mode:
	// River polls, no named prepared statements). Default "none".
	// ($IDEMGATE_DB_POOLER)
	DBPooler string
	// AllowedOrigins are the comma-separated origins whose browser pages
	// may call /mcp and /v1. Default "": the api's own origin only.
	// ($IDEMGATE_ALLOWED_ORIGINS)
	AllowedOrigins string
	// OAuthIssuer turns on OAuth's resource-server mode with this
	// authorization server; OAuthAudience is then required. Default "":
	// off. ($IDEMGATE_OAUTH_ISSUER)
	OAuthIssuer string
	// OAuthAudience is the aud access tokens must carry. Default "".
	// ($IDEMGATE_OAUTH_AUDIENCE)
	OAuthAudience string
	// OAuthResource is the resource identifier of the protected-resource
	// metadata. Default "": OAuthAudience. ($IDEMGATE_OAUTH_RESOURCE)
	OAuthResource string
	// OAuthTenantClaim, OAuthUserClaim and OAuthScopesClaim name the
	// claims holding the tenant, the user and the scopes. Default "":
	// tenant, sub and scope. ($IDEMGATE_OAUTH_TENANT_CLAIM, …)
	OAuthTenantClaim string
	OAuthUserClaim   string
	OAuthScopesClaim string
	// OpsSubjects are OAuth mode's operators: comma-separated access token
	// subjects (sub), each bare or as ISSUER#SUB. An ops:admin token of a
	// listed subject opens River UI and re-drives any tenant; the tenant
	// claim never makes an operator. Requires OAuthIssuer. Default "":
	// none. ($IDEMGATE_OPS_SUBJECTS)
	OpsSubjects string
	// LogLevel is the minimum level of the default logger. Default
	// slog.LevelInfo. ($IDEMGATE_LOG_LEVEL)
	LogLevel slog.Level

	// args are the positional arguments LoadConfig left.
	args []string
}

// Builtins are tools that come with settings, clients and migrations of
// their own, linked into a program by calling their package:
// builtins.Tools() returns idemgate's. Link is idemgate's own: Open refuses
// a value that is not idemgate's built-ins.
type Builtins interface {
	// Link hands the tools to the assembly and returns its parts of them.
	Link() any
}

// linkBuiltins links b and returns an error when it is not idemgate's.
func linkBuiltins(b Builtins) error {
	if b == nil {
		return nil
	}
	if _, ok := b.Link().(*app.Builtins); !ok {
		return fmt.Errorf("idemgate: %T is not idemgate's built-in tools (builtins.Tools())", b)
	}
	return nil
}

// DefaultConfig returns every setting's default, as LoadConfig gives it
// without flags and environment (the built-in tools' settings included).
// It reads no environment. Pass builtins.Tools() when the program serves
// them, as to LoadConfig.
func DefaultConfig(b ...Builtins) *Config {
	for _, bt := range b {
		_ = linkBuiltins(bt)
	}
	return fromInternal(config.Defaults(), nil)
}

// Args are the positional arguments LoadConfig left: a subcommand of the
// program's own and its arguments, in order.
func (c *Config) Args() []string { return c.args }

// LogValue implements slog.LogValuer: every setting, secrets shown only
// as set or unset and DatabaseURL's password masked.
func (c *Config) LogValue() slog.Value {
	if c == nil {
		return slog.StringValue("<nil>")
	}
	return c.internal().LogValue()
}

// ErrHelp is LoadConfig's error for -h or --help, after it printed every
// setting to standard output: exit 0 on it.
var ErrHelp = errors.New("idemgate: help requested")

// LoadConfig reads the configuration from args (flags) and the environment.
// Invalid settings are an error that names the setting; -h or --help prints
// the settings and returns ErrHelp. Positional arguments, before or after
// the flags (in one run), are left to the program (Config.Args). Pass
// builtins.Tools() when the program serves the built-in tools: their
// settings (Stripe, SMTP) are then read and checked too.
func LoadConfig(args []string, b ...Builtins) (*Config, error) {
	for _, bt := range b {
		if err := linkBuiltins(bt); err != nil {
			return nil, err
		}
	}
	c, rest, err := config.LoadArgs(args, os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		return nil, ErrHelp
	}
	if err != nil {
		return nil, err
	}
	return fromInternal(c, rest), nil
}

// settingFields are the internal configuration's settings, by name: its
// fields, those of its embedded groups included.
func settingFields() []reflect.StructField {
	var out []reflect.StructField
	for _, f := range reflect.VisibleFields(reflect.TypeFor[config.Config]()) {
		if !f.Anonymous && f.IsExported() {
			out = append(out, f)
		}
	}
	return out
}

// internal is c as the internal configuration, field by field.
func (c *Config) internal() *config.Config {
	out := &config.Config{}
	src := reflect.ValueOf(c).Elem()
	dst := reflect.ValueOf(out).Elem()
	for _, f := range settingFields() {
		dst.FieldByIndex(f.Index).Set(src.FieldByName(f.Name))
	}
	return out
}

// fromInternal is the internal configuration c as a Config, with args.
func fromInternal(c *config.Config, args []string) *Config {
	out := &Config{args: args}
	src := reflect.ValueOf(c).Elem()
	dst := reflect.ValueOf(out).Elem()
	for _, f := range settingFields() {
		dst.FieldByName(f.Name).Set(src.FieldByIndex(f.Index))
	}
	return out
}

// checked is c as the internal configuration, validated; each invalid
// setting's error is prefixed with its field (Config.Wait: IDEMGATE_WAIT
// (--wait): …) and still unwraps to the setting's error.
func (c *Config) checked() (*config.Config, error) {
	ic := c.internal()
	err := ic.Validate()
	if err == nil {
		return ic, nil
	}
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	} else {
		errs = []error{err}
	}
	for i, e := range errs {
		var se *config.SettingError
		if errors.As(e, &se) {
			if s, ok := config.LookupSetting(se.Setting); ok {
				errs[i] = fmt.Errorf("Config.%s: %w", s.Field, e)
			}
		}
	}
	return nil, errors.Join(errs...)
}
