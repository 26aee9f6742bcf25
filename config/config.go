// Package config is the one configuration that every idemgate binary
// (cmd/api, cmd/worker, cmd/idemctl) reads from flags and the environment.
//
// Each setting has an environment variable, most have a flag, and all have a
// documented default (see the fields of Config and the Default constants). A
// flag given on the command line overrides the environment, and the
// environment overrides the default. An empty environment variable counts as
// unset, and surrounding whitespace in any value is ignored.
//
// Binaries built on the standard flag package call Load. Commands built on
// cobra/pflag register the same flags from Settings and call Resolve with a
// lookup of the flags the user changed; FromEnv reads the environment and
// defaults alone. Every constructor validates, and Validate can be called
// again after a caller changes fields.
//
// Invalid configuration is reported as one *SettingError per bad setting
// (joined with errors.Join), each naming the environment variable, its flag
// and the offending value; secrets are never echoed.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Environment variables, one per setting.
const (
	EnvDatabaseURL     = "DATABASE_URL"
	EnvAPIAddr         = "IDEMGATE_API_ADDR"
	EnvStripeAPIKey    = "STRIPE_API_KEY"
	EnvStripeAPIBase   = "STRIPE_API_BASE"
	EnvSMTPAddr        = "SMTP_ADDR"
	EnvMailFrom        = "MAIL_FROM"
	EnvInflightTimeout = "IDEMGATE_INFLIGHT_TIMEOUT"
	EnvReaperInterval  = "IDEMGATE_REAPER_INTERVAL"
	EnvWait            = "IDEMGATE_WAIT"
	EnvSecret          = "IDEMGATE_SECRET"
	EnvLogLevel        = "IDEMGATE_LOG_LEVEL"
	EnvWorkerAddr      = "IDEMGATE_WORKER_ADDR"
	EnvOperatorTenant  = "IDEMGATE_OPERATOR_TENANT"
)

// Defaults. DatabaseURL, StripeAPIKey and Secret default to empty.
const (
	// DefaultAPIAddr is where cmd/api listens: loopback only.
	DefaultAPIAddr = "127.0.0.1:8080"
	// DefaultStripeAPIBase is Stripe's production API.
	DefaultStripeAPIBase = "https://api.stripe.com"
	// DefaultSMTPAddr is Mailpit's SMTP port on this machine.
	DefaultSMTPAddr = "127.0.0.1:1025"
	// DefaultMailFrom is the From header of outgoing mail.
	DefaultMailFrom = "idemgate <no-reply@localhost>"
	// DefaultInflightTimeout is the length of a worker's lease on a claim.
	DefaultInflightTimeout = 2 * time.Minute
	// DefaultReaperInterval is how often the reaper looks for expired leases.
	DefaultReaperInterval = 30 * time.Second
	// DefaultWait is how long a mutation call waits for a terminal outcome.
	DefaultWait = 2 * time.Second
	// DefaultOperatorTenant is the tenant whose ops:admin tokens may open
	// River UI.
	DefaultOperatorTenant = "ops"
	// DefaultWorkerAddr is where cmd/worker serves /metrics: loopback only.
	DefaultWorkerAddr = "127.0.0.1:9091"
	// DefaultLogLevel is the minimum level logged.
	DefaultLogLevel = slog.LevelInfo
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
)

// Database drivers returned by Config.Driver.
const (
	DriverPostgres = "postgres"
	DriverSQLite   = "sqlite"
)

// Config is the configuration shared by every idemgate binary. Build it
// with Load, Resolve or FromEnv; a Config changed by hand should be checked
// with Validate.
type Config struct {
	// DatabaseURL selects the store. Env DATABASE_URL, flag --database-url,
	// default "" (SQLite at DefaultSQLitePath in the current directory).
	// Accepted forms: "" ; "sqlite:PATH" or "sqlite://PATH" (so
	// "sqlite:///var/lib/idemgate.db" is an absolute path); a
	// "postgres://" or "postgresql://" URL with a host.
	DatabaseURL string

	// APIAddr is the host:port cmd/api listens on (port 0 picks a free one).
	// Env IDEMGATE_API_ADDR, flag --api-addr, default DefaultAPIAddr
	// ("127.0.0.1:8080").
	APIAddr string

	// StripeAPIKey authenticates refunds against Stripe. Env STRIPE_API_KEY,
	// flag --stripe-api-key (prefer the environment: command lines are
	// visible to other users), default "". Never logged.
	StripeAPIKey string

	// StripeAPIBase is the base URL of Stripe's API, e.g. stripe-mock's
	// "http://127.0.0.1:12111". Absolute http(s) URL without query or
	// fragment; a trailing slash is removed when loaded. Env STRIPE_API_BASE,
	// flag --stripe-api-base, default DefaultStripeAPIBase
	// ("https://api.stripe.com").
	StripeAPIBase string

	// SMTPAddr is the host:port of the SMTP server for password-reset mail.
	// Env SMTP_ADDR, flag --smtp-addr, default DefaultSMTPAddr
	// ("127.0.0.1:1025", Mailpit).
	SMTPAddr string

	// MailFrom is the From address of outgoing mail, in net/mail syntax.
	// Env MAIL_FROM, flag --mail-from, default DefaultMailFrom
	// ("idemgate <no-reply@localhost>").
	MailFrom string

	// InflightTimeout is a worker's lease on a claim: a running claim whose
	// lease expired is reclaimed by the reaper. Between 1s and 24h.
	// Env IDEMGATE_INFLIGHT_TIMEOUT, flag --inflight-timeout, default
	// DefaultInflightTimeout (2m).
	InflightTimeout time.Duration

	// ReaperInterval is how often the reaper runs. Between 100ms and 1h and
	// not longer than InflightTimeout. Env IDEMGATE_REAPER_INTERVAL, flag
	// --reaper-interval, default DefaultReaperInterval (30s).
	ReaperInterval time.Duration

	// Wait is how long a mutation call waits for a terminal outcome before
	// answering with a handle; 0 answers at once. Env IDEMGATE_WAIT, flag
	// --wait, default DefaultWait (2s).
	Wait time.Duration

	// Secret derives password-reset tokens; at least MinSecretLen bytes
	// when set. Only binaries that call RequireSecret need it. Env
	// IDEMGATE_SECRET only (no flag, to keep it off command lines), default
	// "". Never logged.
	Secret string

	// OperatorTenant is the tenant whose ops:admin tokens may open River UI
	// (every tenant's jobs). Its tokens are created only with idemctl token
	// create --operator, never as an ordinary tenant's. Env
	// IDEMGATE_OPERATOR_TENANT, flag --operator-tenant, default
	// DefaultOperatorTenant.
	OperatorTenant string
	// WorkerAddr is where cmd/worker serves /metrics and /healthz. Env
	// IDEMGATE_WORKER_ADDR, flag --worker-addr, default DefaultWorkerAddr.
	WorkerAddr string

	// LogLevel is the minimum level logged: debug, info, warn or error
	// (case-insensitive). Env IDEMGATE_LOG_LEVEL, flag --log-level, default
	// DefaultLogLevel (info).
	LogLevel slog.Level
}

// Setting describes one configuration setting, for registering its flag in
// another flag library (cobra/pflag) and for help text.
type Setting struct {
	Env     string // environment variable, e.g. "IDEMGATE_WAIT"
	Flag    string // flag name without dashes, e.g. "wait"; "" when env-only
	Default string // default as text, "" when none
	Usage   string // one-line help; a `quoted` word names the value, as in flag.UnquoteUsage
}

// setting is a Setting with its parser.
type setting struct {
	Setting
	set func(c *Config, v string) error // parses text into c; the error is the reason only
}

// settings lists every setting in the order they are reported.
var settings = []setting{
	{Setting: Setting{EnvDatabaseURL, "database-url", "",
		"database `URL`: postgres://… or sqlite:PATH; empty means SQLite at " + DefaultSQLitePath},
		set: func(c *Config, v string) error { c.DatabaseURL = v; return nil }},
	{Setting: Setting{EnvAPIAddr, "api-addr", DefaultAPIAddr,
		"`host:port` the api listens on"},
		set: func(c *Config, v string) error { c.APIAddr = v; return nil }},
	{Setting: Setting{EnvStripeAPIKey, "stripe-api-key", "",
		"Stripe secret `key` (prefer the environment variable)"},
		set: func(c *Config, v string) error { c.StripeAPIKey = v; return nil }},
	{Setting: Setting{EnvStripeAPIBase, "stripe-api-base", DefaultStripeAPIBase,
		"base `URL` of Stripe's API (stripe-mock in dev and tests)"},
		set: func(c *Config, v string) error { c.StripeAPIBase = strings.TrimRight(v, "/"); return nil }},
	{Setting: Setting{EnvSMTPAddr, "smtp-addr", DefaultSMTPAddr,
		"`host:port` of the SMTP server"},
		set: func(c *Config, v string) error { c.SMTPAddr = v; return nil }},
	{Setting: Setting{EnvMailFrom, "mail-from", DefaultMailFrom,
		"From `address` of outgoing mail"},
		set: func(c *Config, v string) error { c.MailFrom = v; return nil }},
	{Setting: Setting{EnvInflightTimeout, "inflight-timeout", fmtDuration(DefaultInflightTimeout),
		"a worker's lease on a claim, a `duration` from 1s to 24h"},
		set: func(c *Config, v string) error { return parseDuration(&c.InflightTimeout, v) }},
	{Setting: Setting{EnvReaperInterval, "reaper-interval", fmtDuration(DefaultReaperInterval),
		"how often the reaper reclaims expired leases, a `duration` from 100ms to 1h and at most the in-flight timeout"},
		set: func(c *Config, v string) error { return parseDuration(&c.ReaperInterval, v) }},
	{Setting: Setting{EnvWait, "wait", fmtDuration(DefaultWait),
		"how long (a `duration`) a mutation call waits for its outcome before answering with a handle; 0 answers at once"},
		set: func(c *Config, v string) error { return parseDuration(&c.Wait, v) }},
	{Setting: Setting{EnvSecret, "", "",
		"secret that derives password-reset tokens, at least 32 bytes (e.g. openssl rand -hex 32)"},
		set: func(c *Config, v string) error { c.Secret = v; return nil }},
	{Setting: Setting{EnvWorkerAddr, "worker-addr", DefaultWorkerAddr,
		"`host:port` the worker serves /metrics and /healthz on"},
		set: func(c *Config, v string) error { c.WorkerAddr = v; return nil }},
	{Setting: Setting{EnvOperatorTenant, "operator-tenant", DefaultOperatorTenant,
		"the `tenant` whose ops:admin tokens may open River UI"},
		set: func(c *Config, v string) error { c.OperatorTenant = v; return nil }},
	{Setting: Setting{EnvLogLevel, "log-level", "info",
		"minimum log `level`: debug, info, warn or error"},
		set: func(c *Config, v string) error { return parseLevel(&c.LogLevel, v) }},
}

// Settings returns every setting, in a stable order. Usage texts do not name
// the environment variable; callers add it (Load's flags say "(env X)").
// Settings without a Flag (IDEMGATE_SECRET) are read from the environment
// only.
func Settings() []Setting {
	out := make([]Setting, len(settings))
	for i, s := range settings {
		out[i] = s.Setting
	}
	return out
}

// SettingError reports an invalid setting. Callers may use errors.As to tell
// configuration errors (exit code 2) from others.
type SettingError struct {
	Setting string // environment variable, e.g. "IDEMGATE_WAIT"
	Msg     string // what is wrong, quoting the value unless it is secret
}

func (e *SettingError) Error() string {
	for _, s := range settings {
		if s.Env == e.Setting && s.Flag != "" {
			return e.Setting + " (--" + s.Flag + "): " + e.Msg
		}
	}
	return e.Setting + ": " + e.Msg
}

func settingErr(env, format string, args ...any) *SettingError {
	return &SettingError{Setting: env, Msg: fmt.Sprintf(format, args...)}
}

// Defaults returns a Config holding every default.
func Defaults() *Config {
	return &Config{
		APIAddr:         DefaultAPIAddr,
		StripeAPIBase:   DefaultStripeAPIBase,
		SMTPAddr:        DefaultSMTPAddr,
		MailFrom:        DefaultMailFrom,
		InflightTimeout: DefaultInflightTimeout,
		ReaperInterval:  DefaultReaperInterval,
		Wait:            DefaultWait,
		WorkerAddr:      DefaultWorkerAddr,
		OperatorTenant:  DefaultOperatorTenant,
		LogLevel:        DefaultLogLevel,
	}
}

// Load reads the configuration for a binary built on the standard flag
// package: args are the command-line arguments without the program name,
// getenv is usually os.Getenv. Flags override the environment, which
// overrides the defaults; the result is validated. Positional arguments are
// an error. Load prints nothing: for -h or --help it returns an error
// matching flag.ErrHelp, and callers print Usage.
func Load(args []string, getenv func(string) string) (*Config, error) {
	given := make(map[string]string)
	fs := newFlagSet(given)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("config: unexpected argument %q", fs.Arg(0))
	}
	return Resolve(getenv, func(name string) (string, bool) {
		v, ok := given[name]
		return v, ok
	})
}

// FromEnv reads the configuration from the environment and the defaults
// only, and validates it. getenv is usually os.Getenv.
func FromEnv(getenv func(string) string) (*Config, error) {
	return Resolve(getenv, nil)
}

// Resolve builds and validates the configuration from flags, the
// environment and the defaults, in that order of precedence. flagValue
// reports the value of a flag (named without dashes) and whether the user
// set it; it may be nil. A bad environment value overridden by a flag is not
// an error. With cobra:
//
//	for _, s := range config.Settings() {
//		if s.Flag != "" {
//			root.PersistentFlags().String(s.Flag, s.Default, s.Usage+" (env "+s.Env+")")
//		}
//	}
//	// in PersistentPreRunE:
//	cfg, err := config.Resolve(os.Getenv, func(name string) (string, bool) {
//		f := cmd.Flags().Lookup(name)
//		if f == nil || !f.Changed {
//			return "", false
//		}
//		return f.Value.String(), true
//	})
func Resolve(getenv func(string) string, flagValue func(name string) (string, bool)) (*Config, error) {
	c := Defaults()
	var errs []error
	for _, s := range settings {
		v, ok := "", false
		if s.Flag != "" && flagValue != nil {
			v, ok = flagValue(s.Flag)
		}
		if !ok && getenv != nil {
			v = getenv(s.Env)
			ok = strings.TrimSpace(v) != ""
		}
		if !ok {
			continue
		}
		if err := s.set(c, strings.TrimSpace(v)); err != nil {
			errs = append(errs, &SettingError{Setting: s.Env, Msg: err.Error()})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// newFlagSet returns the flag set Load parses; flags the user sets are
// recorded in given (when non-nil) by flag name.
func newFlagSet(given map[string]string) *flag.FlagSet {
	fs := flag.NewFlagSet("idemgate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, s := range settings {
		if s.Flag == "" {
			continue
		}
		fs.Var(&recordValue{given: given, name: s.Flag, text: s.Default}, s.Flag, s.Usage+" (env "+s.Env+")")
	}
	return fs
}

// recordValue is a flag.Value that records the text it is given; parsing
// and validation happen in Resolve, so that errors name the setting.
type recordValue struct {
	given map[string]string
	name  string
	text  string
}

func (r *recordValue) String() string {
	if r == nil { // flag.PrintDefaults calls String on a zero value
		return ""
	}
	return r.text
}

func (r *recordValue) Set(v string) error {
	r.text = v
	if r.given != nil {
		r.given[r.name] = v
	}
	return nil
}

// Usage writes help for Load's flags and the environment-only settings to w.
func Usage(w io.Writer) {
	fs := newFlagSet(nil)
	fs.SetOutput(w)
	fmt.Fprintln(w, "Flags (each overrides its environment variable):")
	fs.PrintDefaults()
	fmt.Fprintln(w, "Environment only:")
	for _, s := range settings {
		if s.Flag == "" {
			fmt.Fprintf(w, "  %s\n    \t%s\n", s.Env, s.Usage)
		}
	}
}

// Validate checks every field and returns one *SettingError per bad
// setting, joined with errors.Join, or nil.
func (c *Config) Validate() error {
	var errs []error
	add := func(err *SettingError) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(validateDatabaseURL(c.DatabaseURL))
	add(validateHostPort(EnvAPIAddr, c.APIAddr, false))
	add(validateHostPort(EnvWorkerAddr, c.WorkerAddr, false))
	if !operatorTenantPattern.MatchString(c.OperatorTenant) {
		add(settingErr(EnvOperatorTenant, "%q must be 1 to 64 characters of [A-Za-z0-9_.:-]", c.OperatorTenant))
	}
	add(validateStripeAPIBase(c.StripeAPIBase))
	// A live key travels only over TLS: plain http is for stripe-mock and
	// test keys.
	if u, err := url.Parse(c.StripeAPIBase); err == nil && u.Scheme == "http" && c.StripeAPIKey != "" &&
		!strings.HasPrefix(c.StripeAPIKey, "sk_test_") && !strings.HasPrefix(c.StripeAPIKey, "rk_test_") {
		add(settingErr(EnvStripeAPIBase, "%q is plain http, which is allowed only with a test key (sk_test_…); a live key needs https",
			u.Redacted()))
	}
	add(validateHostPort(EnvSMTPAddr, c.SMTPAddr, true))
	if _, err := mail.ParseAddress(c.MailFrom); err != nil {
		add(settingErr(EnvMailFrom, "%q is not a valid mail address (%v); example: %q", c.MailFrom, err, DefaultMailFrom))
	}
	inflightOK := validateRange(&errs, EnvInflightTimeout, c.InflightTimeout, MinInflightTimeout, MaxInflightTimeout)
	reaperOK := validateRange(&errs, EnvReaperInterval, c.ReaperInterval, MinReaperInterval, MaxReaperInterval)
	if inflightOK && reaperOK && c.ReaperInterval > c.InflightTimeout {
		add(settingErr(EnvReaperInterval,
			"%s is longer than %s (%s): a claim abandoned by a killed worker is reclaimed within its lease plus one "+
				"reaper interval, so an interval longer than the lease more than doubles that wait; "+
				"lower it or raise %s",
			fmtDuration(c.ReaperInterval), EnvInflightTimeout, fmtDuration(c.InflightTimeout), EnvInflightTimeout))
	}
	if c.Wait < 0 {
		add(settingErr(EnvWait, "%s is negative; use 0 to answer at once", fmtDuration(c.Wait)))
	}
	if c.Secret != "" {
		add(validateSecret(c.Secret))
	}
	switch c.LogLevel {
	case slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError:
	default:
		add(settingErr(EnvLogLevel, "%q is not a level (want debug, info, warn or error)", c.LogLevel.String()))
	}
	return errors.Join(errs...)
}

// operatorTenantPattern is a tenant id's shape.
var operatorTenantPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// MinSecretBits is the least entropy a secret must show, estimated from
// its characters' frequencies: openssl rand -hex 32 gives about 250.
const MinSecretBits = 128

// placeholders are parts of the example secrets people copy; a secret that
// contains one is refused whatever its length.
var placeholders = []string{"change-me", "changeme", "change_me", "replace-me", "replaceme", "placeholder", "your-secret"}

// validateSecret refuses short, placeholder and low-entropy secrets: the
// reset tokens derive from it, so a guessable secret lets anyone forge them.
func validateSecret(secret string) *SettingError {
	if len(secret) < MinSecretLen {
		return settingErr(EnvSecret, "is %d bytes long; at least %d are required (generate one with: openssl rand -hex 32)",
			len(secret), MinSecretLen)
	}
	lower := strings.ToLower(secret)
	for _, p := range placeholders {
		if strings.Contains(lower, p) {
			return settingErr(EnvSecret, "contains the placeholder %q: set a secret of your own (openssl rand -hex 32)", p)
		}
	}
	if bits := entropyBits(secret); bits < MinSecretBits {
		return settingErr(EnvSecret, "looks guessable (about %.0f bits of entropy, at least %d needed): generate one with: openssl rand -hex 32",
			bits, MinSecretBits)
	}
	return nil
}

// entropyBits estimates a string's entropy from its bytes' frequencies.
func entropyBits(s string) float64 {
	counts := map[byte]int{}
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	h := 0.0
	for _, c := range counts {
		p := float64(c) / n
		h -= p * math.Log2(p)
	}
	return h * n
}

// RequireSecret returns an error naming IDEMGATE_SECRET when it is empty.
// Binaries that send password-reset mail call it after loading.
func (c *Config) RequireSecret() error {
	if c.Secret == "" {
		return settingErr(EnvSecret, "is required (it derives password-reset tokens); "+
			"generate one with: openssl rand -hex 32")
	}
	return nil
}

// Driver returns DriverPostgres for a postgres:// or postgresql:// URL and
// DriverSQLite otherwise.
func (c *Config) Driver() string {
	if isPostgresURL(c.DatabaseURL) {
		return DriverPostgres
	}
	return DriverSQLite
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

// LogValue implements slog.LogValuer. StripeAPIKey and Secret appear only as
// "set" or "unset", and a password in DatabaseURL is masked.
func (c *Config) LogValue() slog.Value {
	if c == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.String("database_url", redactDatabaseURL(c.DatabaseURL)),
		slog.String("driver", c.Driver()),
		slog.String("api_addr", c.APIAddr),
		slog.String("stripe_api_key", setOrUnset(c.StripeAPIKey)),
		slog.String("stripe_api_base", c.StripeAPIBase),
		slog.String("smtp_addr", c.SMTPAddr),
		slog.String("mail_from", c.MailFrom),
		slog.Duration("inflight_timeout", c.InflightTimeout),
		slog.Duration("reaper_interval", c.ReaperInterval),
		slog.Duration("wait", c.Wait),
		slog.String("secret", setOrUnset(c.Secret)),
		slog.String("operator_tenant", c.OperatorTenant),
		slog.String("log_level", c.LogLevel.String()),
	)
}

// String formats the configuration like LogValue, so that printing a
// *Config with %v never reveals a secret.
func (c *Config) String() string {
	return c.LogValue().String()
}

func setOrUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return "set"
}

func parseDuration(dst *time.Duration, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is not a duration (examples: 500ms, 2s, 1m)", v)
	}
	*dst = d
	return nil
}

func parseLevel(dst *slog.Level, v string) error {
	switch strings.ToLower(v) {
	case "debug":
		*dst = slog.LevelDebug
	case "info":
		*dst = slog.LevelInfo
	case "warn":
		*dst = slog.LevelWarn
	case "error":
		*dst = slog.LevelError
	default:
		return fmt.Errorf("%q is not a level (want debug, info, warn or error)", v)
	}
	return nil
}

// validateRange reports whether d is within [lo, hi], adding an error if not.
func validateRange(errs *[]error, env string, d, lo, hi time.Duration) bool {
	if d < lo || d > hi {
		*errs = append(*errs, settingErr(env, "%s is out of range (%s to %s)", fmtDuration(d), fmtDuration(lo), fmtDuration(hi)))
		return false
	}
	return true
}

// fmtDuration formats d without trailing zero units: 2m, not 2m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func isPostgresURL(s string) bool {
	l := strings.ToLower(s)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// sqlitePath returns PATH from "sqlite://PATH" or "sqlite:PATH".
func sqlitePath(s string) (string, bool) {
	l := strings.ToLower(s)
	switch {
	case strings.HasPrefix(l, "sqlite://"):
		return s[len("sqlite://"):], true
	case strings.HasPrefix(l, "sqlite:"):
		return s[len("sqlite:"):], true
	}
	return "", false
}

func validateDatabaseURL(s string) *SettingError {
	if s == "" {
		return nil
	}
	if path, ok := sqlitePath(s); ok {
		if path == "" {
			return settingErr(EnvDatabaseURL, "%q names no file: want sqlite:PATH, e.g. sqlite:%s", s, DefaultSQLitePath)
		}
		return nil
	}
	shown := redactDatabaseURL(s)
	if !isPostgresURL(s) {
		return settingErr(EnvDatabaseURL, "%q is neither empty (SQLite at %s), sqlite:PATH nor a postgres:// URL",
			shown, DefaultSQLitePath)
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Parse's reasons quote parts of the input, which may be parts
		// of the password: give none.
		return settingErr(EnvDatabaseURL, "%q is not a valid URL (percent-encode special characters in the "+
			"user and password)", shown)
	}
	if u.Host == "" || u.Hostname() == "" {
		return settingErr(EnvDatabaseURL, "%q has no host: want postgres://user:password@host:5432/db", shown)
	}
	return nil
}

// redactDatabaseURL masks the password in a URL, even one that does not
// parse (an unescaped '/' or '@' in a password confuses url.Parse).
func redactDatabaseURL(s string) string {
	if _, ok := sqlitePath(s); ok || s == "" {
		return s
	}
	u, err := url.Parse(s)
	if err == nil && u.User != nil {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return s
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// validateHostPort checks host:port with a numeric port; a destination
// (needHost) needs a host and a port from 1.
func validateHostPort(env, s string, needHost bool) *SettingError {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return settingErr(env, "%q is not host:port (example: 127.0.0.1:8080)", s)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return settingErr(env, "%q has port %q; want a number from 0 to 65535", s, port)
	}
	if needHost {
		if host == "" {
			return settingErr(env, "%q has no host (example: 127.0.0.1:1025)", s)
		}
		if n == 0 {
			return settingErr(env, "%q has port 0; want a number from 1 to 65535", s)
		}
	}
	return nil
}

func validateStripeAPIBase(s string) *SettingError {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return settingErr(EnvStripeAPIBase, "%q is not a URL (example: %s)", s, DefaultStripeAPIBase)
	case u.Scheme != "http" && u.Scheme != "https":
		return settingErr(EnvStripeAPIBase, "%q is not an absolute http(s) URL (example: %s)", s, DefaultStripeAPIBase)
	case u.Host == "" || u.Hostname() == "":
		return settingErr(EnvStripeAPIBase, "%q has no host (example: %s)", s, DefaultStripeAPIBase)
	case u.User != nil:
		return settingErr(EnvStripeAPIBase, "%q must not carry credentials; set %s instead", u.Redacted(), EnvStripeAPIKey)
	case u.RawQuery != "" || u.ForceQuery:
		return settingErr(EnvStripeAPIBase, "%q must not have a query", s)
	case u.Fragment != "":
		return settingErr(EnvStripeAPIBase, "%q must not have a fragment", s)
	}
	return nil
}
