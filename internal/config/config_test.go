package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// env returns a getenv func over m.
// TestMain reads the built-in tools' settings, as a program that links
// them does; TestBuiltinSettingsOnlyWhenLinked checks the other case.
func TestMain(m *testing.M) {
	EnableBuiltinSettings()
	os.Exit(m.Run())
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

const testSecret = "0123456789abcdef0123456789abcdef" // 32 bytes

// testIssuer is an OAuth issuer for the settings that need one.
const testIssuer = "https://id.example.com"

func TestLoadDefaults(t *testing.T) {
	t.Parallel()

	cfg, err := Load(nil, env(nil))
	require.NoError(t, err)
	require.Equal(t, Defaults(), cfg)
	require.Equal(t, &Config{
		DatabaseURL:         "",
		APIAddr:             "127.0.0.1:8080",
		BuiltinSettings:     BuiltinSettings{StripeAPIKey: "", StripeAPIBase: "https://api.stripe.com", SMTPAddr: "127.0.0.1:1025", MailFrom: "idemgate <no-reply@localhost>"},
		InflightTimeout:     2 * time.Minute,
		ReaperInterval:      30 * time.Second,
		River:               "own",
		Wait:                2 * time.Second,
		Secret:              "",
		WorkerAddr:          "127.0.0.1:9091",
		OperatorTenant:      "ops",
		RateLimit:           50,
		RateBurst:           200,
		DBPooler:            "none",
		ApprovalsMaxPending: 50,
		DuplicateWindow:     10 * time.Minute,
		LogLevel:            slog.LevelInfo,
	}, cfg)
	require.Equal(t, DriverSQLite, cfg.Driver())
	require.Equal(t, "idemgate.db", cfg.SQLitePath())

	// Nil getenv behaves like an empty environment.
	fromNil, err := Load(nil, nil)
	require.NoError(t, err)
	require.Equal(t, cfg, fromNil)
}

// TestDefaultConstants checks that the Default constants, kept for other
// packages, agree with the default tags.
func TestDefaultConstants(t *testing.T) {
	t.Parallel()

	require.Equal(t, &Config{
		APIAddr:             DefaultAPIAddr,
		InflightTimeout:     DefaultInflightTimeout,
		BuiltinSettings:     BuiltinSettings{StripeAPIBase: DefaultStripeAPIBase, SMTPAddr: DefaultSMTPAddr, MailFrom: DefaultMailFrom},
		ReaperInterval:      DefaultReaperInterval,
		River:               DefaultRiver,
		Wait:                DefaultWait,
		WorkerAddr:          DefaultWorkerAddr,
		OperatorTenant:      DefaultOperatorTenant,
		RateLimit:           DefaultRateLimit,
		RateBurst:           DefaultRateBurst,
		DBPooler:            DefaultDBPooler,
		ApprovalsMaxPending: DefaultApprovalsMaxPending,
		DuplicateWindow:     DefaultDuplicateWindow,
		LogLevel:            DefaultLogLevel,
	}, Defaults())
}

// fullEnv sets every setting that has a flag, for the precedence tests.
var fullEnv = map[string]string{
	EnvDatabaseURL:          "postgres://u:pw@db:5432/idemgate",
	EnvAPIAddr:              "0.0.0.0:9000",
	EnvStripeAPIKey:         "sk_test_env",
	EnvStripeAPIBase:        "http://stripe-mock:12111",
	EnvSMTPAddr:             "mailpit:1025",
	EnvMailFrom:             "ops@example.com",
	EnvResetLinkBase:        "https://app.example.com/reset",
	EnvInflightTimeout:      "5m",
	EnvReaperInterval:       "10s",
	EnvWait:                 "0",
	EnvSecret:               testSecret,
	EnvLogLevel:             "DEBUG",
	EnvWorkerAddr:           "0.0.0.0:9191",
	EnvOperatorTenant:       "operators",
	"IDEMGATE_OPS_USER":     "oncall",
	"IDEMGATE_OPS_PASSWORD": "s3cret-operator-password",
	EnvRateLimit:            "2.5",
	EnvRateBurst:            "10",
	EnvDBPooler:             "transaction",
	EnvApprovalsMaxPending:  "7",
	EnvDuplicateWindow:      "90s",
	EnvStripeWebhookSecrets: "whsec_test_old_0001,whsec_test_new_0002",
}

var precedenceTests = []struct {
	name  string
	args  []string
	env   map[string]string
	check func(t *testing.T, cfg *Config)
}{
	{
		name: "EnvOverridesDefaults",
		env:  fullEnv,
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, &Config{
				DatabaseURL: "postgres://u:pw@db:5432/idemgate",
				APIAddr:     "0.0.0.0:9000",
				BuiltinSettings: BuiltinSettings{StripeAPIKey: "sk_test_env", StripeAPIBase: "http://stripe-mock:12111", SMTPAddr: "mailpit:1025", MailFrom: "ops@example.com", ResetLinkBase: "https://app.example.com/reset",
					StripeWebhookSecrets: "whsec_test_old_0001,whsec_test_new_0002"},
				InflightTimeout:     5 * time.Minute,
				ReaperInterval:      10 * time.Second,
				River:               "own",
				Wait:                0,
				Secret:              testSecret,
				WorkerAddr:          "0.0.0.0:9191",
				OperatorTenant:      "operators",
				OpsUser:             "oncall",
				OpsPassword:         "s3cret-operator-password",
				RateLimit:           2.5,
				RateBurst:           10,
				DBPooler:            "transaction",
				ApprovalsMaxPending: 7,
				DuplicateWindow:     90 * time.Second,
				LogLevel:            slog.LevelDebug,
			}, cfg)
			require.Equal(t, DriverPostgres, cfg.Driver())
			require.Empty(t, cfg.SQLitePath())
		},
	},
	{
		name: "FlagsOverrideEnv",
		env:  fullEnv,
		args: []string{
			"--database-url", "sqlite:/tmp/x.db",
			"--api-addr=:0",
			"--stripe-api-key", "sk_test_flag",
			"--stripe-api-base", "https://stripe.internal/",
			"--smtp-addr", "smtp.example.com:25",
			"--mail-from", "Ops <ops@example.org>",
			"--reset-link-base", "http://reset.internal:8080/r?lang=en",
			"--inflight-timeout", "1h",
			"--reaper-interval", "1m",
			"--wait", "250ms",
			"--worker-addr", "127.0.0.1:0",
			"--operator-tenant", "root",
			"--rate-limit", "0",
			"--approvals-max-pending", "0",
			"--duplicate-window", "0",
			"--rate-burst", "0",
			"--db-pooler", "none",
			"--log-level", "error",
		},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, &Config{
				DatabaseURL: "sqlite:/tmp/x.db",
				APIAddr:     ":0",
				BuiltinSettings: BuiltinSettings{StripeAPIKey: "sk_test_flag", StripeAPIBase: "https://stripe.internal", SMTPAddr: "smtp.example.com:25", MailFrom: "Ops <ops@example.org>", ResetLinkBase: "http://reset.internal:8080/r?lang=en",
					StripeWebhookSecrets: "whsec_test_old_0001,whsec_test_new_0002"},
				InflightTimeout: time.Hour,
				ReaperInterval:  time.Minute,
				River:           "own",
				Wait:            250 * time.Millisecond,
				Secret:          testSecret,
				WorkerAddr:      "127.0.0.1:0",
				OperatorTenant:  "root",
				OpsUser:         "oncall",
				OpsPassword:     "s3cret-operator-password",
				RateLimit:       0,
				RateBurst:       0,
				DBPooler:        "none",
				LogLevel:        slog.LevelError,
			}, cfg)
			require.Equal(t, DriverSQLite, cfg.Driver())
			require.Equal(t, "/tmp/x.db", cfg.SQLitePath())
		},
	},
	{
		name: "FlagOverridesInvalidEnv",
		env:  map[string]string{EnvWait: "2 secs", EnvAPIAddr: "nope"},
		args: []string{"--wait", "1s", "--api-addr", "127.0.0.1:1"},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, time.Second, cfg.Wait)
			require.Equal(t, "127.0.0.1:1", cfg.APIAddr)
		},
	},
	{
		name: "FlagSetToDefaultStillOverridesEnv",
		env:  map[string]string{EnvAPIAddr: "0.0.0.0:9000"},
		args: []string{"--api-addr", DefaultAPIAddr},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, DefaultAPIAddr, cfg.APIAddr)
		},
	},
	{
		name: "EmptyEnvMeansDefault",
		env:  map[string]string{EnvAPIAddr: "", EnvWait: "  ", EnvMailFrom: ""},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, DefaultAPIAddr, cfg.APIAddr)
			require.Equal(t, DefaultWait, cfg.Wait)
			require.Equal(t, DefaultMailFrom, cfg.MailFrom)
		},
	},
	{
		name: "WhitespaceTrimmed",
		env:  map[string]string{EnvDatabaseURL: " postgres://db/x\n", EnvWait: " 3s "},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, "postgres://db/x", cfg.DatabaseURL)
			require.Equal(t, 3*time.Second, cfg.Wait)
		},
	},
	{
		name: "FlagWhitespaceTrimmed",
		args: []string{"--api-addr= 127.0.0.1:1 ", "--wait", " 3s", "--rate-limit= 0.5 ", "--rate-burst", " 3"},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, "127.0.0.1:1", cfg.APIAddr)
			require.Equal(t, 3*time.Second, cfg.Wait)
			require.Equal(t, 0.5, cfg.RateLimit)
			require.Equal(t, 3, cfg.RateBurst)
		},
	},
	{
		name: "SQLiteDoubleSlash",
		env:  map[string]string{EnvDatabaseURL: "sqlite:///var/lib/idemgate.db"},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, DriverSQLite, cfg.Driver())
			require.Equal(t, "/var/lib/idemgate.db", cfg.SQLitePath())
		},
	},
	{
		name: "SQLiteRelative",
		env:  map[string]string{EnvDatabaseURL: "sqlite://data/x.db"},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, "data/x.db", cfg.SQLitePath())
		},
	},
	{
		name: "PostgresqlScheme",
		env:  map[string]string{EnvDatabaseURL: "postgresql://u@localhost/db?sslmode=disable"},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, DriverPostgres, cfg.Driver())
		},
	},
	{
		name: "WaitZeroAllowed",
		args: []string{"--wait=0s"},
		check: func(t *testing.T, cfg *Config) {
			require.Zero(t, cfg.Wait)
		},
	},
	{
		name: "BoundsInclusive",
		env:  map[string]string{EnvInflightTimeout: "24h", EnvReaperInterval: "1h"},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, 24*time.Hour, cfg.InflightTimeout)
			require.Equal(t, time.Hour, cfg.ReaperInterval)
		},
	},
	{
		// 0 turns the limit off; the burst is then ignored, even 0.
		name: "RateLimitOff",
		env:  map[string]string{EnvRateLimit: "0", EnvRateBurst: "0"},
		check: func(t *testing.T, cfg *Config) {
			require.Zero(t, cfg.RateLimit)
			require.Zero(t, cfg.RateBurst)
		},
	},
	{
		name: "RateLimitBoundsInclusive",
		env:  map[string]string{EnvRateLimit: "1000000", EnvRateBurst: "1"},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, float64(MaxRateLimit), cfg.RateLimit)
			require.Equal(t, 1, cfg.RateBurst)
		},
	},
	{
		name: "ReaperEqualToInflight",
		env:  map[string]string{EnvInflightTimeout: "1s", EnvReaperInterval: "1s"},
		check: func(t *testing.T, cfg *Config) {
			require.Equal(t, cfg.InflightTimeout, cfg.ReaperInterval)
		},
	},
}

func TestLoadPrecedence(t *testing.T) {
	t.Parallel()

	for _, tt := range precedenceTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Load(tt.args, env(tt.env))
			require.NoError(t, err)
			tt.check(t, cfg)
		})
	}
}

func TestLoadThenValidate(t *testing.T) {
	t.Parallel()

	cfg, err := Load(nil, env(map[string]string{EnvWait: "1s"}))
	require.NoError(t, err)
	cfg.ReaperInterval = time.Hour // a caller's own change
	err = cfg.Validate()
	require.Error(t, err)
	require.Contains(t, err.Error(), EnvReaperInterval)
}

var loadErrorTests = []struct {
	name    string
	args    []string
	env     map[string]string
	setting string   // env var the message must name
	want    []string // further fragments of the message
}{
	{"DatabaseURLScheme", nil, map[string]string{EnvDatabaseURL: "mysql://h/db"}, EnvDatabaseURL, []string{`"mysql://h/db"`}},
	{"AllowedOriginsPath", nil, map[string]string{EnvAllowedOrigins: "https://app.example.com/page"}, EnvAllowedOrigins, []string{`"https://app.example.com/page"`, "scheme://host[:port]"}},
	{"AllowedOriginsScheme", nil, map[string]string{EnvAllowedOrigins: "https://ok.example.com, ftp://h"}, EnvAllowedOrigins, []string{`"ftp://h"`}},
	{"AllowedOriginsNull", []string{"--allowed-origins", "null"}, nil, EnvAllowedOrigins, []string{`"null"`}},
	{"DatabaseURLSQLiteNoPath", nil, map[string]string{EnvDatabaseURL: "sqlite:"}, EnvDatabaseURL, []string{`"sqlite:"`}},
	{"DatabaseURLSQLiteSlashesNoPath", nil, map[string]string{EnvDatabaseURL: "sqlite://"}, EnvDatabaseURL, nil},
	{"DatabaseURLNoHost", nil, map[string]string{EnvDatabaseURL: "postgres:///db"}, EnvDatabaseURL, []string{"no host"}},
	{"DatabaseURLUnparseable", nil, map[string]string{EnvDatabaseURL: "postgres://h:port/db"}, EnvDatabaseURL, []string{"not a valid URL"}},
	{"DatabaseURLFlag", []string{"--database-url", "file.db"}, nil, EnvDatabaseURL, []string{"--database-url", `"file.db"`}},
	{"DatabaseURLPoolMaxConnsZero", nil, map[string]string{EnvDatabaseURL: "postgres://h/db?pool_max_conns=0"}, EnvDatabaseURL, []string{`pool_max_conns="0"`}},
	{"DatabaseURLPoolMaxConnsWord", nil, map[string]string{EnvDatabaseURL: "postgres://h/db?pool_max_conns=ten"}, EnvDatabaseURL, []string{`pool_max_conns="ten"`}},
	{"DatabaseURLPoolMaxConnsHuge", nil, map[string]string{EnvDatabaseURL: "postgres://h/db?pool_max_conns=100000"}, EnvDatabaseURL, []string{"1 to 10000"}},
	{"APIAddrNoPort", nil, map[string]string{EnvAPIAddr: "localhost"}, EnvAPIAddr, []string{`"localhost"`}},
	{"APIAddrNamedPort", nil, map[string]string{EnvAPIAddr: "localhost:http"}, EnvAPIAddr, []string{`"http"`}},
	{"APIAddrPortTooLarge", nil, map[string]string{EnvAPIAddr: ":65536"}, EnvAPIAddr, []string{`":65536"`}},
	{"APIAddrNegativePort", nil, map[string]string{EnvAPIAddr: ":-1"}, EnvAPIAddr, nil},
	{"APIAddrEmptyFlag", []string{"--api-addr="}, nil, EnvAPIAddr, []string{`""`}},
	{"StripeAPIBaseRelative", nil, map[string]string{EnvStripeAPIBase: "api.stripe.com"}, EnvStripeAPIBase, []string{`"api.stripe.com"`}},
	{"StripeAPIBaseScheme", nil, map[string]string{EnvStripeAPIBase: "ftp://api.stripe.com"}, EnvStripeAPIBase, []string{"http(s)"}},
	{"StripeAPIBaseNoHost", nil, map[string]string{EnvStripeAPIBase: "https:///v1"}, EnvStripeAPIBase, []string{"no host"}},
	{"StripeAPIBaseQuery", nil, map[string]string{EnvStripeAPIBase: "https://api.stripe.com?x=1"}, EnvStripeAPIBase, []string{"query"}},
	{"StripeAPIBaseEmptyQuery", nil, map[string]string{EnvStripeAPIBase: "https://api.stripe.com?"}, EnvStripeAPIBase, []string{"query"}},
	{"StripeAPIBaseFragment", nil, map[string]string{EnvStripeAPIBase: "https://api.stripe.com#x"}, EnvStripeAPIBase, []string{"fragment"}},
	{"StripeAPIBaseUnparseable", nil, map[string]string{EnvStripeAPIBase: "http://[::1"}, EnvStripeAPIBase, nil},
	{"StripeWebhookSecretsPrefix", nil, map[string]string{EnvStripeWebhookSecrets: "sk_test_notawebhooksecret"}, EnvStripeWebhookSecrets, []string{"item 1", "whsec_"}},
	{"StripeWebhookSecretsEmptyItem", nil, map[string]string{EnvStripeWebhookSecrets: "whsec_test_old_0001,,whsec_test_new_0002"}, EnvStripeWebhookSecrets, []string{"item 2", "empty"}},
	{"StripeWebhookSecretsRepeated", nil, map[string]string{EnvStripeWebhookSecrets: "whsec_test_old_0001, whsec_test_old_0001"}, EnvStripeWebhookSecrets, []string{"item 2", "repeats"}},
	{"SMTPAddrNoPort", nil, map[string]string{EnvSMTPAddr: "mailpit"}, EnvSMTPAddr, []string{`"mailpit"`}},
	{"SMTPAddrNoHost", nil, map[string]string{EnvSMTPAddr: ":25"}, EnvSMTPAddr, []string{"no host"}},
	{"SMTPAddrPortZero", nil, map[string]string{EnvSMTPAddr: "mailpit:0"}, EnvSMTPAddr, []string{"port 0"}},
	{"MailFromInvalid", nil, map[string]string{EnvMailFrom: "not an address"}, EnvMailFrom, []string{`"not an address"`}},
	{"ResetLinkBaseRelative", nil, map[string]string{EnvResetLinkBase: "/reset-password"}, EnvResetLinkBase, []string{`"/reset-password"`, "absolute"}},
	{"ResetLinkBaseAllInterfaces", nil, map[string]string{EnvResetLinkBase: "http://0.0.0.0:8080/reset-password"}, EnvResetLinkBase, []string{"0.0.0.0"}},
	{"ResetLinkBaseFragment", []string{"--reset-link-base", "https://app.example.com/r#x"}, nil, EnvResetLinkBase, []string{"--reset-link-base", "fragment"}},
	{"InflightTimeoutUnparseable", nil, map[string]string{EnvInflightTimeout: "two minutes"}, EnvInflightTimeout, []string{`"two minutes" is not a duration`}},
	{"InflightTimeoutTooShort", nil, map[string]string{EnvInflightTimeout: "999ms", EnvReaperInterval: "500ms"}, EnvInflightTimeout, []string{"999ms", "1s to 24h"}},
	{"InflightTimeoutTooLong", nil, map[string]string{EnvInflightTimeout: "25h"}, EnvInflightTimeout, []string{"25h", "1s to 24h"}},
	{"InflightTimeoutZero", nil, map[string]string{EnvInflightTimeout: "0s"}, EnvInflightTimeout, nil},
	{"InflightTimeoutNegative", nil, map[string]string{EnvInflightTimeout: "-1m"}, EnvInflightTimeout, []string{"-1m"}},
	{"ReaperIntervalUnparseable", nil, map[string]string{EnvReaperInterval: "30"}, EnvReaperInterval, []string{`"30" is not a duration`, "examples"}},
	{"ReaperIntervalTooShort", nil, map[string]string{EnvReaperInterval: "99ms"}, EnvReaperInterval, []string{"100ms to 1h"}},
	{"RiverSharedOnSQLite", nil, map[string]string{"IDEMGATE_RIVER": "shared"}, "IDEMGATE_RIVER", []string{"postgres://"}},
	{"RiverUnknown", nil, map[string]string{"IDEMGATE_RIVER": "team"}, "IDEMGATE_RIVER", []string{`"team"`, "own", "shared"}},
	{"ReaperIntervalTooLong", []string{"--reaper-interval", "61m"}, map[string]string{EnvInflightTimeout: "2h"}, EnvReaperInterval, []string{"--reaper-interval", "1h1m"}},
	{"ReaperIntervalZero", nil, map[string]string{EnvReaperInterval: "0"}, EnvReaperInterval, nil},
	{"ReaperIntervalOverInflight", nil, map[string]string{EnvInflightTimeout: "10s", EnvReaperInterval: "11s"}, EnvReaperInterval, []string{"11s", EnvInflightTimeout, "lease plus one reaper interval"}},
	{"WaitUnparseable", nil, map[string]string{EnvWait: "2 secs"}, EnvWait, []string{`IDEMGATE_WAIT (--wait): "2 secs" is not a duration (examples: 500ms, 2s, 1m)`}},
	{"WaitNegative", []string{"--wait=-1s"}, nil, EnvWait, []string{"-1s", "negative"}},
	{"StripeLiveKeyOverHTTP", nil, map[string]string{EnvStripeAPIKey: "sk_live_abc", EnvStripeAPIBase: "http://stripe.internal:12111"}, EnvStripeAPIBase, []string{"plain http", "https"}},
	{"OperatorTenantInvalid", nil, map[string]string{EnvOperatorTenant: "ops team"}, EnvOperatorTenant, []string{`"ops team"`}},
	{"OpsSubjectsWithoutOAuth", nil, map[string]string{EnvOpsSubjects: "ana"}, EnvOpsSubjects, []string{EnvOAuthIssuer, "--operator"}},
	{"OpsSubjectsEmptyEntry", nil, map[string]string{EnvOAuthIssuer: testIssuer, EnvOAuthAudience: "https://api.example.com/mcp",
		EnvOpsSubjects: "ana,,bo"}, EnvOpsSubjects, []string{"entry 2 is empty"}},
	{"OpsSubjectsOtherIssuer", nil, map[string]string{EnvOAuthIssuer: testIssuer, EnvOAuthAudience: "https://api.example.com/mcp",
		EnvOpsSubjects: "https://evil.example.com#ana"}, EnvOpsSubjects, []string{"entry 1", `"https://evil.example.com"`, EnvOAuthIssuer}},
	{"OpsSubjectsIssuerWithoutSubject", nil, map[string]string{EnvOAuthIssuer: testIssuer, EnvOAuthAudience: "https://api.example.com/mcp",
		EnvOpsSubjects: testIssuer}, EnvOpsSubjects, []string{"no #SUB"}},
	{"OpsSubjectsNotAnID", nil, map[string]string{EnvOAuthIssuer: testIssuer, EnvOAuthAudience: "https://api.example.com/mcp",
		EnvOpsSubjects: testIssuer + "# ana"}, EnvOpsSubjects, []string{"entry 1", "not an id"}},
	{"SecretTooShort", nil, map[string]string{EnvSecret: "short-secret"}, EnvSecret, []string{"12 bytes", "32"}},
	// The red-team finding: compose shipped this default, and reset
	// tokens derive from the secret.
	{"SecretComposePlaceholder", nil, map[string]string{EnvSecret: "change-me-change-me-change-me-change-me"}, EnvSecret, []string{`placeholder "change-me"`}},
	{"SecretPlaceholderAnyCase", nil, map[string]string{EnvSecret: "3f9a1c7e5b2d8046e1f7-ChangeMe-a9c3b5d2e8f0"}, EnvSecret, []string{"placeholder"}},
	{"SecretRepeated", nil, map[string]string{EnvSecret: strings.Repeat("k", 64)}, EnvSecret, []string{"guessable", "0 bits"}},
	{"SecretLowEntropy", nil, map[string]string{EnvSecret: strings.Repeat("ab", 40)}, EnvSecret, []string{"guessable", "80 bits"}},
	{"LogLevelUnknown", nil, map[string]string{EnvLogLevel: "verbose"}, EnvLogLevel, []string{`"verbose"`}},
	{"LogLevelNumeric", []string{"--log-level", "INFO+2"}, nil, EnvLogLevel, []string{"--log-level"}},
	{"RateLimitUnparseable", nil, map[string]string{EnvRateLimit: "fast"}, EnvRateLimit, []string{`"fast" is not a number`}},
	{"RateLimitNaN", nil, map[string]string{EnvRateLimit: "NaN"}, EnvRateLimit, []string{`"NaN" is not a number`}},
	{"RateLimitInf", []string{"--rate-limit", "+Inf"}, nil, EnvRateLimit, []string{"--rate-limit", "not a number"}},
	{"RateLimitNegative", nil, map[string]string{EnvRateLimit: "-1"}, EnvRateLimit, []string{"-1 is negative", "0 to turn the limit off"}},
	{"RateLimitTooHigh", nil, map[string]string{EnvRateLimit: "1e7"}, EnvRateLimit, []string{"above 1000000"}},
	{"RateBurstUnparseable", nil, map[string]string{EnvRateBurst: "1.5"}, EnvRateBurst, []string{`"1.5" is not a whole number`}},
	{"RateBurstNegative", []string{"--rate-burst=-1"}, nil, EnvRateBurst, []string{"--rate-burst", "-1 is negative"}},
	{"RateBurstTooHigh", nil, map[string]string{EnvRateBurst: "1000001"}, EnvRateBurst, []string{"above 1000000"}},
	{"RateBurstZeroWhileLimited", nil, map[string]string{EnvRateBurst: "0"}, EnvRateBurst, []string{"refuse every call", EnvRateLimit + "=0"}},
	{"DuplicateWindowTooLong", nil, map[string]string{EnvDuplicateWindow: "25h"}, EnvDuplicateWindow, []string{"25h0m0s is out of range", "0 to turn the guard off"}},
	{"DuplicateWindowNegative", []string{"--duplicate-window=-1m"}, nil, EnvDuplicateWindow, []string{"--duplicate-window", "out of range"}},
	{"ApprovalsMaxPendingNegative", nil, map[string]string{EnvApprovalsMaxPending: "-1"}, EnvApprovalsMaxPending, []string{"-1 is out of range", "0 to turn the cap off"}},
	{"ApprovalsMaxPendingTooHigh", []string{"--approvals-max-pending", "100001"}, nil, EnvApprovalsMaxPending, []string{"--approvals-max-pending", "want 1 to 100000"}},
	{"ApprovalsMaxPendingUnparseable", nil, map[string]string{EnvApprovalsMaxPending: "many"}, EnvApprovalsMaxPending, []string{`"many" is not a whole number`}},
	{"DBPoolerUnknown", nil, map[string]string{EnvDBPooler: "session"}, EnvDBPooler, []string{`"session"`, "none or transaction"}},
	{"DBPoolerOnSQLite", []string{"--db-pooler", "transaction"}, nil, EnvDBPooler, []string{"postgres://"}},
	{"DBPoolerSimpleProtocol", nil, map[string]string{EnvDBPooler: "transaction",
		EnvDatabaseURL: "postgres://pgbouncer:6432/idemgate?default_query_exec_mode=simple_protocol"}, EnvDatabaseURL, []string{"simple_protocol"}},
	{"DBPoolerUnknownExecMode", nil, map[string]string{EnvDBPooler: "transaction",
		EnvDatabaseURL: "postgres://pgbouncer:6432/idemgate?default_query_exec_mode=fast"}, EnvDatabaseURL, []string{`"fast"`}},
	{"SecretAsFlag", []string{"--secret", testSecret}, nil, EnvSecret, []string{"has no flag", "environment"}},
	{"OpsPasswordAsFlag", []string{"--ops-password=s3cret-operator"}, nil, "IDEMGATE_OPS_PASSWORD", []string{"has no flag"}},
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()

	for _, tt := range loadErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Load(tt.args, env(tt.env))
			require.Error(t, err)
			require.Nil(t, cfg)
			require.Contains(t, err.Error(), tt.setting)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
			var se *SettingError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tt.setting, se.Setting)
		})
	}
}

func TestLoadReportsEverySetting(t *testing.T) {
	t.Parallel()

	_, err := Load(nil, env(map[string]string{
		EnvAPIAddr:  "x",
		EnvSMTPAddr: "y",
		EnvSecret:   "z",
	}))
	require.Error(t, err)
	for _, s := range []string{EnvAPIAddr, EnvSMTPAddr, EnvSecret} {
		require.Contains(t, err.Error(), s)
	}

	// Parse errors are all reported too, before validation.
	_, err = Load(nil, env(map[string]string{EnvWait: "x", EnvLogLevel: "y", EnvAPIAddr: "z"}))
	require.Error(t, err)
	require.Contains(t, err.Error(), EnvWait)
	require.Contains(t, err.Error(), EnvLogLevel)
	require.NotContains(t, err.Error(), EnvAPIAddr)
}

func TestLoadFlagErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		args []string
		is   error
		want string
	}{
		{"Help", []string{"-h"}, ErrHelp, ""},
		{"HelpLong", []string{"--help"}, ErrHelp, ""},
		{"UnknownFlag", []string{"--nope"}, nil, "nope"},
		{"SingleDashLongFlag", []string{"-wait", "1s"}, nil, "unknown flag"},
		{"MissingValue", []string{"--wait"}, nil, "wait"},
		{"PositionalArgument", []string{"serve"}, nil, "unexpected argument serve"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(tt.args, env(nil), io.Discard)
			require.Error(t, err)
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			} else {
				require.NotErrorIs(t, err, ErrHelp)
			}
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestValidateSecretNotEchoed(t *testing.T) {
	t.Parallel()

	_, err := Load(nil, env(map[string]string{EnvSecret: "hunter2-hunter2"}))
	require.Error(t, err)
	require.Contains(t, err.Error(), EnvSecret)
	require.NotContains(t, err.Error(), "hunter2")
}

func TestDatabaseURLPasswordNotEchoed(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		url  string
	}{
		{"NoHost", "postgres://admin:s3cr3tpw@/db"},
		{"UnescapedSlash", "postgres://admin:s3cr3t/pw@db.example.com/db"},
		{"BadEscape", "postgres://admin:s3cr3t%zzpw@db.example.com/db"},
		{"UnescapedSlashPortLike", "postgres://admin:12345/s3cr3tpw@db.example.com/x?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Defaults()
			cfg.DatabaseURL = tt.url
			if err := cfg.Validate(); err != nil {
				require.Contains(t, err.Error(), EnvDatabaseURL)
				require.NotContains(t, err.Error(), "s3cr3t")
			}
			require.NotContains(t, cfg.String(), "s3cr3t")
			require.Contains(t, redactDatabaseURL(tt.url), "xxxxx")
		})
	}
}

func TestRequireSecret(t *testing.T) {
	t.Parallel()

	cfg, err := Load(nil, env(nil))
	require.NoError(t, err)
	err = cfg.RequireSecret()
	require.Error(t, err)
	require.Contains(t, err.Error(), EnvSecret)
	var se *SettingError
	require.ErrorAs(t, err, &se)

	cfg, err = Load(nil, env(map[string]string{EnvSecret: testSecret}))
	require.NoError(t, err)
	require.NoError(t, cfg.RequireSecret())
}

func TestLogValue(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		env     map[string]string
		want    []string
		wantNot []string
	}{
		{
			name: "Set",
			env: map[string]string{EnvStripeAPIKey: "sk_test_SECRETKEY", EnvSecret: testSecret,
				EnvDatabaseURL: "postgres://u:dbpassword@db/x", "IDEMGATE_OPS_USER": "oncall",
				"IDEMGATE_OPS_PASSWORD": "opsPASSWORD-123", EnvInflightTimeout: "2m"},
			want: []string{"stripe_api_key=set", "secret=set", "ops_password=set", "ops_user=oncall",
				"postgres://u:xxxxx@db/x", "driver=postgres", "wait=2s", "inflight_timeout=2m0s"},
			wantNot: []string{"SECRETKEY", testSecret, "dbpassword", "PASSWORD-123"},
		},
		{
			name: "Unset",
			env:  nil,
			want: []string{"stripe_api_key=unset", "secret=unset", "ops_password=unset", "driver=sqlite",
				"reset_link_base_used=http://127.0.0.1:8080/reset-password",
				"api_addr=127.0.0.1:8080", "worker_addr=127.0.0.1:9091", "reaper_interval=30s", "log_level=INFO",
				"rate_limit=50", "rate_burst=200"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Load(nil, env(tt.env))
			require.NoError(t, err)

			var buf bytes.Buffer
			slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "config", cfg)
			out := buf.String()
			for _, w := range tt.want {
				require.Contains(t, out, w)
			}
			buf.Reset()
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", cfg)
			require.Contains(t, buf.String(), `"inflight_timeout":"2m0s"`)
			for _, printed := range []string{out, buf.String(), cfg.String(), fmt.Sprintf("%v", cfg), fmt.Sprint(cfg)} {
				for _, w := range tt.wantNot {
					require.NotContains(t, printed, w)
				}
			}
		})
	}
}

// TestLogValueEverySetting guards that a new field is logged without
// touching LogValue, and a secret-looking one is not logged in clear.
func TestLogValueEverySetting(t *testing.T) {
	t.Parallel()

	attrs := Defaults().LogValue().Group()
	keys := map[string]bool{}
	for _, a := range attrs {
		keys[a.Key] = true
	}
	secretName := regexp.MustCompile(`(?i)key|secret|password|token|url`)
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if f.Anonymous {
			continue // a group: its fields are the settings
		}
		require.True(t, keys[logKey(f)], "%s is not logged", f.Name)
		if secretName.MatchString(f.Name) && !strings.HasSuffix(f.Name, "Base") && f.Name != "PublicURL" {
			_, ok := f.Tag.Lookup("secret")
			require.True(t, ok, "%s looks secret: tag it secret", f.Name)
		}
	}
	require.Len(t, attrs, len(Settings())+2) // and the driver and the reset link base used
}

func TestSettings(t *testing.T) {
	t.Parallel()

	all := Settings()
	require.Len(t, all, 32)
	flags, envs := map[string]bool{}, map[string]bool{}
	for _, s := range all {
		require.Regexp(t, `^[A-Z][A-Z0-9_]+$`, s.Env, s.Field)
		require.NotEmpty(t, s.Help, s.Field)
		require.False(t, envs[s.Env], "duplicate env %s", s.Env)
		envs[s.Env] = true
		if s.Flag != "" {
			require.Regexp(t, `^[a-z][a-z0-9-]+$`, s.Flag, s.Field)
			require.False(t, flags[s.Flag], "duplicate flag %s", s.Flag)
			flags[s.Flag] = true
		}
	}
	for _, env := range []string{EnvSecret, "IDEMGATE_OPS_USER", "IDEMGATE_OPS_PASSWORD", EnvStripeWebhookSecrets} {
		s, ok := LookupSetting(env)
		require.True(t, ok)
		require.Empty(t, s.Flag, "%s must stay off command lines", env)
	}
	for _, env := range []string{EnvDatabaseURL, EnvAPIAddr, EnvStripeAPIKey, EnvStripeAPIBase, EnvSMTPAddr,
		EnvMailFrom, EnvResetLinkBase, EnvInflightTimeout, EnvReaperInterval, EnvWait, EnvSecret, EnvLogLevel, EnvWorkerAddr, EnvOperatorTenant,
		EnvRateLimit, EnvRateBurst, EnvApprovalsMaxPending, EnvDuplicateWindow, EnvDBPooler, EnvOpsSubjects, EnvStripeWebhookSecrets} {
		require.True(t, envs[env], "Env constant %s names no setting", env)
	}

	// Every documented default given as a flag yields the defaults.
	for _, s := range all {
		if s.Flag == "" || s.Default == "" {
			continue
		}
		fromDefault, err := Load([]string{"--" + s.Flag, s.Default}, env(nil))
		require.NoError(t, err, s.Flag)
		require.Equal(t, Defaults(), fromDefault, s.Flag)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	_, err := load([]string{"-h"}, env(map[string]string{EnvAPIAddr: "bad"}), &buf)
	require.ErrorIs(t, err, ErrHelp)
	out := strings.Join(strings.Fields(buf.String()), " ")
	for _, s := range Settings() {
		require.Contains(t, out, "$"+s.Env)
		if s.Flag != "" {
			require.Contains(t, out, "--"+s.Flag+"=")
		} else {
			require.NotContains(t, out, "--"+strings.ToLower(strings.TrimPrefix(s.Env, "IDEMGATE_")))
		}
	}
	for _, d := range []string{"default 127.0.0.1:8080", "default 2m", "default 30s", "default info", "default 50", "default 200"} {
		require.Contains(t, out, d)
	}
	require.Contains(t, out, "Environment only")
}

// TestReadmeTable keeps README.md's configuration table true: a row per
// setting with its flag (or "(env only)") and its default.
func TestReadmeTable(t *testing.T) {
	t.Parallel()

	// The configuration table lives in docs/configuration.md (the README
	// links it).
	readme, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	rows := map[string][]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.HasPrefix(line, "| `") {
			continue
		}
		cols = cols[1:]
		for i := range cols {
			cols[i] = strings.TrimSpace(cols[i])
		}
		rows[strings.Trim(cols[0], "`")] = cols
	}
	for _, s := range Settings() {
		cols, ok := rows[s.Env]
		require.True(t, ok, "docs/configuration.md's table has no row for %s", s.Env)
		if s.Flag != "" {
			require.Equal(t, "`--"+s.Flag+"`", cols[1], s.Env)
		} else {
			require.Equal(t, "(env only)", cols[1], s.Env)
		}
		if s.Default != "" {
			require.Contains(t, cols[2], "`"+s.Default+"`", s.Env)
		}
	}
}

// TestPostgresExecMode: a transaction pooler gets an execution mode
// without named prepared statements unless DATABASE_URL names one; without
// a pooler pgx keeps its default.
func TestPostgresExecMode(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name, url, pooler, want string
	}{
		{"Direct", "postgres://db/x", "", ""},
		{"DirectNamed", "postgres://db/x?default_query_exec_mode=exec", "", "exec"},
		{"Pooled", "postgres://pgbouncer:6432/x?sslmode=disable", "transaction", DefaultPooledExecMode},
		{"PooledNamed", "postgres://pgbouncer:6432/x?default_query_exec_mode=describe_exec", "transaction", "describe_exec"},
		// A pooler that keeps prepared statements (PgBouncer 1.21+).
		{"PooledCachedStatements", "postgres://pgbouncer:6432/x?default_query_exec_mode=cache_statement", "transaction", "cache_statement"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Load(nil, env(map[string]string{EnvDatabaseURL: tt.url, EnvDBPooler: tt.pooler}))
			require.NoError(t, err)
			require.Equal(t, tt.want, cfg.PostgresExecMode())
			require.Equal(t, tt.pooler == PoolerTransaction, cfg.Pooled())
		})
	}
}

func TestFmtDuration(t *testing.T) {
	t.Parallel()

	tests := []struct {
		in   time.Duration
		want string
	}{
		{24 * time.Hour, "24h"},
		{time.Hour, "1h"},
		{2 * time.Minute, "2m"},
		{90 * time.Second, "1m30s"},
		{time.Hour + time.Second, "1h0m1s"},
		{100 * time.Millisecond, "100ms"},
		{0, "0s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, fmtDuration(tt.in))
		})
	}
}

func FuzzLoad(f *testing.F) {
	f.Add("2m", "30s", "2s", "", "https://api.stripe.com")
	f.Add("2 secs", "-1s", "0", "postgres://u:p@h:5432/db", "http://127.0.0.1:12111/")
	f.Add("1e9h", "9223372036854775807ns", "", "sqlite:", "https://[::1]:x")
	f.Add("", "", "", "postgres://u:p/w@h/db?x#y", "https://h?")
	f.Add("1s", "1s", "1s", "sqlite://", "ftp://x")
	f.Fuzz(func(t *testing.T, inflight, reaper, wait, dbURL, stripeBase string) {
		getenv := env(map[string]string{
			EnvInflightTimeout: inflight,
			EnvReaperInterval:  reaper,
			EnvWait:            wait,
			EnvDatabaseURL:     dbURL,
			EnvStripeAPIBase:   stripeBase,
		})
		cfg, err := Load(nil, getenv)
		if err != nil {
			require.Nil(t, cfg)
			var se *SettingError
			require.ErrorAs(t, err, &se)
			return
		}
		// Whatever loads is valid, and stays so.
		require.NoError(t, cfg.Validate())
		require.Contains(t, []string{DriverPostgres, DriverSQLite}, cfg.Driver())
		if cfg.Driver() == DriverSQLite {
			require.NotEmpty(t, cfg.SQLitePath())
		}
		require.False(t, strings.HasSuffix(cfg.StripeAPIBase, "/"))
		_ = cfg.String()

		// The same values as flags give the same configuration.
		var args []string
		for name, v := range map[string]string{"inflight-timeout": inflight, "reaper-interval": reaper, "wait": wait,
			"database-url": dbURL, "stripe-api-base": stripeBase} {
			if strings.TrimSpace(v) != "" {
				args = append(args, "--"+name+"="+v)
			}
		}
		fromFlags, err := Load(args, env(nil))
		require.NoError(t, err)
		require.Equal(t, cfg, fromFlags)
	})
}

// TestSettingErrorsAreJoined guards the documented contract that Validate's result can
// be inspected with errors.As across several settings.
func TestSettingErrorsAreJoined(t *testing.T) {
	t.Parallel()

	cfg := Defaults()
	cfg.APIAddr = "bad"
	cfg.Wait = -time.Second
	err := cfg.Validate()
	require.Error(t, err)
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok)
	var names []string
	for _, e := range joined.Unwrap() {
		var se *SettingError
		require.True(t, errors.As(e, &se))
		names = append(names, se.Setting)
	}
	require.Equal(t, []string{EnvAPIAddr, EnvWait}, names)
}

// TestResetLinkBaseOrDefault: the setting wins; otherwise the api's own
// page, never an all-interfaces address.
func TestResetLinkBaseOrDefault(t *testing.T) {
	t.Parallel()

	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/reset-password",
		"localhost:9000": "http://localhost:9000/reset-password",
		"10.0.0.5:8080":  "http://10.0.0.5:8080/reset-password",
		"0.0.0.0:8080":   "http://127.0.0.1:8080/reset-password",
		"[::]:8080":      "http://127.0.0.1:8080/reset-password",
		":8080":          "http://127.0.0.1:8080/reset-password",
		"[::1]:8080":     "http://[::1]:8080/reset-password",
	} {
		cfg, err := Load(nil, env(map[string]string{EnvAPIAddr: addr}))
		require.NoError(t, err, addr)
		require.Equal(t, want, cfg.ResetLinkBaseOrDefault(), addr)
	}
	cfg, err := Load(nil, env(map[string]string{EnvAPIAddr: "0.0.0.0:8080", EnvResetLinkBase: "https://app.example.com/reset"}))
	require.NoError(t, err)
	require.Equal(t, "https://app.example.com/reset", cfg.ResetLinkBaseOrDefault())
}

// TestPoolMaxConns: DATABASE_URL's pool_max_conns always wins; without it
// the caller's default applies; SQLite has no pool.
func TestPoolMaxConns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		url  string
		def  int32
		want int32
	}{
		{"URL", "postgres://h/db?sslmode=disable&pool_max_conns=5", DefaultPoolMaxConns, 5},
		{"URLAboveDefault", "postgres://h/db?pool_max_conns=50", DefaultCLIPoolMaxConns, 50},
		{"Default", "postgres://h/db", DefaultPoolMaxConns, DefaultPoolMaxConns},
		{"SQLite", "sqlite:x.db", DefaultPoolMaxConns, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Load(nil, env(map[string]string{EnvDatabaseURL: tt.url}))
			require.NoError(t, err)
			require.Equal(t, tt.want, cfg.PoolMaxConns(tt.def))
		})
	}
}

func TestOriginsList(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, func(k string) string {
		if k == EnvAllowedOrigins {
			return " https://app.example.com , http://127.0.0.1:3000,"
		}
		return ""
	})
	require.NoError(t, err)
	require.Equal(t, []string{"https://app.example.com", "http://127.0.0.1:3000"}, c.Origins())
	require.Nil(t, Defaults().Origins())
}

func TestLoadArgsLeavesPositionalArguments(t *testing.T) {
	t.Parallel()
	env := func(k string) string {
		if k == EnvLogLevel {
			return "warn"
		}
		return ""
	}
	for _, argv := range [][]string{
		{"--wait=1s", "token", "acme", "alice"},
		{"token", "acme", "alice", "--wait=1s"},
	} {
		c, args, err := LoadArgs(argv, env)
		require.NoError(t, err, argv)
		require.Equal(t, []string{"token", "acme", "alice"}, args)
		require.Equal(t, time.Second, c.Wait)
		require.Equal(t, slog.LevelWarn, c.LogLevel)
	}
	_, _, err := LoadArgs([]string{"serve", "--no-such-flag"}, env)
	require.ErrorContains(t, err, "no-such-flag")
	// Load still refuses them.
	_, err = Load([]string{"serve"}, env)
	require.ErrorContains(t, err, "unexpected argument serve")
}

// Without the built-ins linked, their settings do not exist: no flag, no
// help line, the environment not read, nothing checked.
func TestBuiltinSettingsOnlyWhenLinked(t *testing.T) {
	// Not parallel: it switches the package's builtinSettings off.
	builtinSettings.Store(false)
	defer builtinSettings.Store(true)
	c, err := Load(nil, env(map[string]string{EnvStripeAPIKey: "sk_live_x", EnvStripeAPIBase: "ftp://nope", EnvSMTPAddr: "nohost"}))
	require.NoError(t, err, "their environment is not read, so not refused")
	require.Empty(t, c.StripeAPIKey)
	_, err = Load([]string{"--stripe-api-key=sk_test_1"}, env(nil))
	require.ErrorContains(t, err, "stripe-api-key")
	var help bytes.Buffer
	_, _, err = loadGrammar([]string{"--help"}, env(nil), &help, false)
	require.ErrorIs(t, err, ErrHelp)
	require.NotContains(t, help.String(), "STRIPE_API_KEY")
	require.NotContains(t, help.String(), "SMTP_ADDR")
	require.Contains(t, help.String(), "IDEMGATE_WAIT")
	require.NotContains(t, c.String(), "stripe")

	builtinSettings.Store(true)
	_, err = Load(nil, env(map[string]string{EnvStripeAPIBase: "ftp://nope"}))
	require.ErrorContains(t, err, EnvStripeAPIBase)
	help.Reset()
	_, _, err = loadGrammar([]string{"--help"}, env(nil), &help, false)
	require.ErrorIs(t, err, ErrHelp)
	require.Contains(t, help.String(), "STRIPE_API_KEY")
}

// TestDatabasePasswordNeverShown: a password in DATABASE_URL, in any form
// (user information, a query parameter, a keyword/value DSN, a URL that
// does not parse), appears neither in the configuration's log line nor in
// a refusal.
func TestDatabasePasswordNeverShown(t *testing.T) {
	t.Parallel()
	const pw = "hunter2-s3cret"
	for _, dsn := range []string{
		"postgres://app:" + pw + "@db:5432/idemgate",
		"postgres://app@db:5432/idemgate?sslmode=disable&password=" + pw,
		"postgresql://db/idemgate?password=" + pw + "&pool_max_conns=4",
		"postgres://app@db/idemgate?sslpassword=" + pw,
		"host=db user=app password=" + pw + " dbname=idemgate",
		"host=db user=app password='" + pw + " x' dbname=idemgate",
		"postgres://app:" + pw + "/x@db/idemgate",
		"postgres://app@db/idemgate?pool_max_conns=0&password=" + pw,
	} {
		cfg, err := Load(nil, env(map[string]string{EnvDatabaseURL: dsn}))
		if err != nil {
			require.NotContains(t, err.Error(), pw, "the refusal of %q", dsn)
			require.NotContains(t, err.Error(), "s3cret")
			continue
		}
		require.NotContains(t, cfg.LogValue().String(), "s3cret", "the log line of %q", dsn)
		require.NotContains(t, cfg.String(), "s3cret")
	}
	require.Equal(t, "postgres://app@db/x?password=xxxxx&sslmode=disable", redactDatabaseURL("postgres://app@db/x?password="+pw+"&sslmode=disable"))
}

// TestOperatorSubjects: IDEMGATE_OPS_SUBJECTS lists bare subjects and
// issuer-qualified ones (a subject that is a URL, or holds '#'), trimmed.
func TestOperatorSubjects(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, env(map[string]string{EnvOAuthIssuer: testIssuer, EnvOAuthAudience: "https://api.example.com/mcp",
		EnvOpsSubjects: " ana@example.com , auth0|64f1c2,https://id.example.com#https://id.example.com/u/7#x "}))
	require.NoError(t, err)
	require.Equal(t, []OpsSubject{
		{Subject: "ana@example.com"},
		{Subject: "auth0|64f1c2"},
		{Issuer: testIssuer, Subject: "https://id.example.com/u/7#x"},
	}, c.OperatorSubjects())
	require.Nil(t, Defaults().OperatorSubjects())
}
