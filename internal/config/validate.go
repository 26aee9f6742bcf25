package config

import (
	"errors"
	"log/slog"
	"math"
	"net"
	"net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/vocab"
)

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
	if c.PublicURL != "" {
		if err := vocab.CheckLinkBase(c.PublicURL); err != nil {
			add(settingErr(EnvPublicURL, "%q %v (example: https://idemgate.example.com)", c.PublicURL, err))
		} else if u, _ := url.Parse(c.PublicURL); u.RawQuery != "" {
			add(settingErr(EnvPublicURL, "%q must not have a query (example: https://idemgate.example.com)", c.PublicURL))
		}
	}
	if builtinSettings.Load() {
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
		if c.ResetLinkBase != "" {
			if err := vocab.CheckLinkBase(c.ResetLinkBase); err != nil {
				add(settingErr(EnvResetLinkBase, "%q %v (example: https://app.example.com/reset-password)", c.ResetLinkBase, err))
			}
		}
		add(validateWebhookSecrets(c.StripeWebhookSecrets))
	}
	for _, o := range c.Origins() {
		if !validOrigin(o) {
			add(settingErr(EnvAllowedOrigins, "%q is not an origin: want scheme://host[:port] with scheme http or https and nothing after the port (example: https://app.example.com)", o))
		}
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
	add(validatePooler(c))
	if c.River != RiverOwn && c.River != RiverShared {
		add(settingErr(EnvRiver, "%q is not whose River the database's is (want %s or %s)", c.River, RiverOwn, RiverShared))
	} else if c.River == RiverShared && c.Driver() != DriverPostgres {
		add(settingErr(EnvRiver, "%s needs a postgres:// %s (the embedded SQLite file's River is idemgate's alone)", RiverShared, EnvDatabaseURL))
	}
	if _, err := parseOpsSubjects(c.OpsSubjects, c.OAuthIssuer); err != nil {
		add(err)
	}
	if c.OAuthIssuer != "" && c.OAuthAudience == "" {
		add(settingErr(EnvOAuthAudience, "is required with %s (the aud access tokens must carry, usually this api's MCP URL)", EnvOAuthIssuer))
	}
	add(validateRateLimit(c.RateLimit))
	add(validateRateBurst(c.RateLimit, c.RateBurst))
	if c.DuplicateWindow < 0 || c.DuplicateWindow > 24*time.Hour {
		add(settingErr(EnvDuplicateWindow, "%s is out of range; want up to 24h, or 0 to turn the guard off", c.DuplicateWindow))
	}
	if c.ApprovalsMaxPending < 0 || c.ApprovalsMaxPending > MaxApprovalsMaxPending {
		add(settingErr(EnvApprovalsMaxPending, "%d is out of range; want 1 to %d, or 0 to turn the cap off",
			c.ApprovalsMaxPending, MaxApprovalsMaxPending))
	}
	switch c.LogLevel {
	case slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError:
	default:
		add(settingErr(EnvLogLevel, "%q is not a level (want debug, info, warn or error)", c.LogLevel.String()))
	}
	return errors.Join(errs...)
}

// validatePooler checks IDEMGATE_DB_POOLER and what a transaction pooler
// asks of DATABASE_URL: Postgres, and a pgx execution mode River works
// with. PostgresExecMode picks one without named prepared statements when
// the URL names none (a transaction pooler hands each transaction another
// server connection, where such a statement may not exist).
func validatePooler(c *Config) *SettingError {
	switch c.DBPooler {
	case PoolerNone:
		return nil
	case PoolerTransaction:
	default:
		return settingErr(EnvDBPooler, "%q is not a pooler mode (want %s or %s)", c.DBPooler, PoolerNone, PoolerTransaction)
	}
	if !isPostgresURL(c.DatabaseURL) {
		return settingErr(EnvDBPooler, "%s needs a postgres:// %s (SQLite has no pooler)", PoolerTransaction, EnvDatabaseURL)
	}
	switch m := urlExecMode(c.DatabaseURL); m {
	// cache_statement, named explicitly, is for a pooler that keeps
	// prepared statements across transactions (PgBouncer 1.21 and later
	// with max_prepared_statements set).
	case "", "cache_describe", "describe_exec", "exec", "cache_statement":
	case "simple_protocol":
		return settingErr(EnvDatabaseURL, "default_query_exec_mode=simple_protocol sends River's jsonb arguments as bytea; "+
			"with %s=%s drop the parameter (idemgate then uses %s) or use describe_exec or exec",
			EnvDBPooler, PoolerTransaction, DefaultPooledExecMode)
	default:
		return settingErr(EnvDatabaseURL, "default_query_exec_mode=%q is not a pgx execution mode (want cache_describe, describe_exec or exec)", m)
	}
	return nil
}

// urlExecMode returns the default_query_exec_mode parameter of a postgres://
// URL, or "".
func urlExecMode(s string) string {
	if !isPostgresURL(s) {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Query().Get("default_query_exec_mode")
}

// validateRateLimit refuses a negative, non-finite or absurd rate: 0 is
// how the limit is turned off.
func validateRateLimit(limit float64) *SettingError {
	switch {
	case math.IsNaN(limit) || math.IsInf(limit, 0):
		return settingErr(EnvRateLimit, "%v is not a number of calls per second; use 0 to turn the limit off", limit)
	case limit < 0:
		return settingErr(EnvRateLimit, "%v is negative; use 0 to turn the limit off", limit)
	case limit > MaxRateLimit:
		return settingErr(EnvRateLimit, "%v is above %d calls per second; use 0 to turn the limit off", limit, MaxRateLimit)
	}
	return nil
}

// validateRateBurst refuses a burst that would refuse every call (0 while
// the limit is on) or is out of range.
func validateRateBurst(limit float64, burst int) *SettingError {
	switch {
	case burst < 0:
		return settingErr(EnvRateBurst, "%d is negative; want 1 to %d", burst, MaxRateBurst)
	case burst > MaxRateBurst:
		return settingErr(EnvRateBurst, "%d is above %d", burst, MaxRateBurst)
	case burst == 0 && limit > 0:
		return settingErr(EnvRateBurst, "0 would refuse every call while %s is %v: want 1 to %d, or %s=0 to turn the limit off",
			EnvRateLimit, limit, MaxRateBurst, EnvRateLimit)
	}
	return nil
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
	if v := u.Query().Get(URLPoolMaxConns); u.Query().Has(URLPoolMaxConns) {
		if n, err := strconv.ParseInt(v, 10, 32); err != nil || n < 1 || n > MaxPoolMaxConns {
			return settingErr(EnvDatabaseURL, "%s=%q is not a number of connections from 1 to %d", URLPoolMaxConns, v, MaxPoolMaxConns)
		}
	}
	return nil
}

// urlPoolMaxConns returns the pool_max_conns parameter of a postgres://
// URL that Validate accepted, and whether it has one.
func urlPoolMaxConns(s string) (int32, bool) {
	if !isPostgresURL(s) {
		return 0, false
	}
	u, err := url.Parse(s)
	if err != nil || !u.Query().Has(URLPoolMaxConns) {
		return 0, false
	}
	n, err := strconv.ParseInt(u.Query().Get(URLPoolMaxConns), 10, 32)
	if err != nil || n < 1 {
		return 0, false
	}
	return int32(n), true
}

// RedactDatabaseURL is s with every password in it masked: the form of a
// DATABASE_URL fit for a log line or an error.
func RedactDatabaseURL(s string) string { return redactDatabaseURL(s) }

// redactDatabaseURL masks the password in a URL, even one that does not
// parse (an unescaped '/' or '@' in a password confuses url.Parse).
func redactDatabaseURL(s string) string {
	if _, ok := sqlitePath(s); ok || s == "" {
		return s
	}
	return passwordParam.ReplaceAllString(redactUserinfo(s), "${1}=xxxxx")
}

// passwordParam is a password given as a parameter: in a URL's query
// (?password=…, &sslpassword=…) or a keyword/value DSN (password=…).
var passwordParam = regexp.MustCompile(`(?i)\b((?:ssl)?password)=('[^']*'|[^&\s]*)`)

// redactUserinfo masks the password of a URL's user information.
func redactUserinfo(s string) string {
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

// validOrigin reports whether s is an http(s) origin: scheme://host[:port],
// no user, path, query or fragment.
func validOrigin(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil &&
		u.Opaque == "" && (u.Path == "" || u.Path == "/") && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery
}

// validateWebhookSecrets checks IDEMGATE_STRIPE_WEBHOOK_SECRETS: empty, or
// Stripe signing secrets (whsec_…) separated by commas, each once. The
// secrets themselves are never named in the message.
func validateWebhookSecrets(v string) *SettingError {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	seen := map[string]bool{}
	for i, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
			return settingErr(EnvStripeWebhookSecrets, "item %d is empty; want whsec_… secrets separated by commas", i+1)
		case !strings.HasPrefix(s, "whsec_") || len(s) < len("whsec_")+8:
			return settingErr(EnvStripeWebhookSecrets, "item %d is not a Stripe webhook signing secret (want whsec_…, as the endpoint's page at Stripe shows it)", i+1)
		case seen[s]:
			return settingErr(EnvStripeWebhookSecrets, "item %d repeats an earlier secret", i+1)
		}
		seen[s] = true
	}
	return nil
}
