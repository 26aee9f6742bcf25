package ops

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The environment variables of the operator's HTTP Basic credentials. When
// both are unset, Basic authentication is disabled and only bearer tokens
// with scope ops:admin open the operator routes.
const (
	EnvOpsUser     = "IDEMGATE_OPS_USER"
	EnvOpsPassword = "IDEMGATE_OPS_PASSWORD"
)

// MinPasswordLen is the shortest IDEMGATE_OPS_PASSWORD accepted.
const MinPasswordLen = 12

// Realm is the realm of the operator routes' Basic challenge.
const Realm = "idemgate ops"

// BasicCredentials are the operator's HTTP Basic credentials. Only their
// sha256 digests are kept, compared in constant time; they never print.
type BasicCredentials struct {
	user     string
	userHash [sha256.Size]byte
	passHash [sha256.Size]byte
}

// NewBasicCredentials checks and returns Basic credentials. The messages
// name the environment variables.
func NewBasicCredentials(user, password string) (*BasicCredentials, error) {
	switch {
	case user == "":
		return nil, fmt.Errorf("%s is required when %s is set", EnvOpsUser, EnvOpsPassword)
	case password == "":
		return nil, fmt.Errorf("%s is required when %s is set", EnvOpsPassword, EnvOpsUser)
	case !validOperatorName(user) || strings.ContainsRune(user, ':'):
		// It names the operator in audit rows and logs.
		return nil, fmt.Errorf("%s: must be 1 to %d characters of [A-Za-z0-9_.@+-]", EnvOpsUser, MaxOperatorLen)
	case len(password) < MinPasswordLen:
		return nil, fmt.Errorf("%s: must be at least %d characters (generate one with: openssl rand -hex 16)", EnvOpsPassword, MinPasswordLen)
	case strings.IndexFunc(password, unicode.IsControl) >= 0:
		return nil, fmt.Errorf("%s: must not contain control characters", EnvOpsPassword)
	}
	return &BasicCredentials{user: user, userHash: sha256.Sum256([]byte(user)), passHash: sha256.Sum256([]byte(password))}, nil
}

// BasicIfSet checks the configured IDEMGATE_OPS_USER and
// IDEMGATE_OPS_PASSWORD (config.Config's OpsUser and OpsPassword). Both
// unset: nil, Basic authentication off.
func BasicIfSet(user, password string) (*BasicCredentials, error) {
	if user == "" && password == "" {
		return nil, nil
	}
	return NewBasicCredentials(user, password)
}

// User is the operator's user name (not a secret).
func (c *BasicCredentials) User() string { return c.user }

// String never shows the password.
func (c *BasicCredentials) String() string { return "ops user " + c.user + " (password set)" }

// LogValue implements slog.LogValuer: the user only.
func (c *BasicCredentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("user", c.user), slog.String("password", "(set)"))
}

// match compares in constant time: digests of equal length, both compared
// whatever the first gives.
func (c *BasicCredentials) match(user, password string) bool {
	u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return subtle.ConstantTimeCompare(u[:], c.userHash[:])&subtle.ConstantTimeCompare(p[:], c.passHash[:]) == 1
}

// How an operator authenticated (Operator.Via).
const (
	// ViaBasic is the Basic credentials (IDEMGATE_OPS_USER).
	ViaBasic = "basic"
	// ViaBearer is one of idemgate's own tokens (idemctl token create).
	ViaBearer = "bearer"
	// ViaOAuth is an OAuth access token.
	ViaOAuth = "oauth"
)

// Operator is who passed operator authentication: a person, named in the
// audit rows of what they do.
type Operator struct {
	// Name is the person: the Basic user, or the token's user.
	Name string
	// TenantID is the token's tenant; empty for Basic credentials, which
	// are the deployment's.
	TenantID string
	// Via is ViaBasic, ViaBearer or ViaOAuth.
	Via string
	// Deployment is true for the deployment's operators, who open River UI
	// and re-drive any tenant's operations: the Basic credentials, an
	// ops:admin token of the operator tenant (minted only by idemctl token
	// create --operator), and an ops:admin access token whose subject
	// IDEMGATE_OPS_SUBJECTS lists. A tenant claim never makes one. Other
	// ops:admin tokens re-drive their own tenant's operations only.
	Deployment bool
}

// Channel is route (ChannelRedrive, ChannelRiverUI) with how the operator
// authenticated, as audit rows name it: "riverui (oauth)".
func (o Operator) Channel(route string) string { return route + " (" + o.Via + ")" }

// OperatorSubject is an OAuth operator (IDEMGATE_OPS_SUBJECTS): an access
// token subject, and the issuer that must have issued it ("" for the one
// the api trusts).
type OperatorSubject struct {
	Issuer  string
	Subject string
}

type ctxKey struct{}

// OperatorFromContext returns the operator of a request that passed Auth.
func OperatorFromContext(ctx context.Context) (Operator, bool) {
	o, ok := ctx.Value(ctxKey{}).(Operator)
	return o, ok
}

// Auth is the operator routes' authentication: a bearer token with scope
// ops:admin, through the api's own bearer authentication, or the Basic
// credentials when set.
type Auth struct {
	// Bearer is the api's bearer authentication (the api's authenticate middleware):
	// it answers 401 for a missing or invalid token and otherwise puts the
	// actor in the request's context (tenancy.ActorFromContext). Required.
	Bearer func(http.Handler) http.Handler
	// Basic, when set, also accepts these HTTP Basic credentials.
	Basic *BasicCredentials
	// Throttle, when set, limits failed Basic attempts per client address,
	// or per device for a request with a valid device cookie (Devices).
	Throttle *Throttle
	// Devices, when set, issues a device cookie on a successful Basic
	// login and throttles requests that carry one on their own.
	Devices *Devices
	// OperatorTenant is the tenant whose ops:admin tokens of idemgate's
	// own are the deployment's operators (IDEMGATE_OPERATOR_TENANT). An
	// OAuth access token claiming it is refused unless its subject is one
	// of OperatorSubjects. Empty: no such tenant.
	OperatorTenant string
	// OperatorSubjects are the OAuth access token subjects that are the
	// deployment's operators (IDEMGATE_OPS_SUBJECTS).
	OperatorSubjects []OperatorSubject
	// Logger defaults to slog.Default(). Credentials are never logged.
	Logger *slog.Logger
}

// operatorSubject reports whether actor's verified issuer and subject are
// listed in OperatorSubjects.
func (a *Auth) operatorSubject(actor vocab.Actor) bool {
	if actor.Subject == "" {
		return false
	}
	for _, s := range a.OperatorSubjects {
		if s.Subject == actor.Subject && (s.Issuer == "" || s.Issuer == actor.Issuer) {
			return true
		}
	}
	return false
}

// bearerOperator is the operator of an ops:admin token, or why it is
// refused: an OAuth access token is a deployment operator only when its
// subject is listed, and one that claims the operator tenant without that
// is no operator at all.
func (a *Auth) bearerOperator(actor vocab.Actor) (Operator, string) {
	op := Operator{Name: actor.UserID, TenantID: actor.TenantID, Via: ViaBearer}
	if actor.Issuer == "" && actor.Subject == "" {
		op.Deployment = a.OperatorTenant != "" && actor.TenantID == a.OperatorTenant
		return op, ""
	}
	op.Via = ViaOAuth
	switch {
	case a.operatorSubject(actor):
		op.Deployment = true
	case a.OperatorTenant != "" && actor.TenantID == a.OperatorTenant:
		return op, "the access token's tenant claim is the operator tenant " + strconv.Quote(a.OperatorTenant) +
			", but its subject is not an operator's: operators are listed by subject in IDEMGATE_OPS_SUBJECTS, never made by a tenant claim"
	}
	return op, ""
}

// Middleware refuses requests without operator credentials: 401 with a
// Basic challenge (when Basic is on) for none or wrong ones, 403 for a
// bearer token without scope ops:admin.
func (a *Auth) Middleware(next http.Handler) http.Handler {
	if a.Bearer == nil {
		panic("ops: Auth.Bearer is required")
	}
	logger := a.Logger
	if logger == nil {
		logger = slog.Default()
	}
	scoped := a.Bearer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor, ok := tenancy.ActorFromContext(r.Context())
		if !ok || !actor.HasScope(tenancy.ScopeOpsAdmin) {
			logger.WarnContext(r.Context(), "ops: bearer token without scope "+tenancy.ScopeOpsAdmin+" refused",
				"tenant", actor.TenantID, "user", actor.UserID, "token_id", actor.TokenID, "method", r.Method, "path", r.URL.Path)
			writeProblem(w, r, http.StatusForbidden, vocab.CodeForbidden, "operator routes need a token with scope "+tenancy.ScopeOpsAdmin)
			return
		}
		op, refusal := a.bearerOperator(actor)
		if refusal != "" {
			logger.WarnContext(r.Context(), "ops: access token refused: not an operator", "subject", actor.Subject,
				"issuer", actor.Issuer, "tenant", actor.TenantID, "user", actor.UserID, "token_id", actor.TokenID,
				"reason", "tenant claim is the operator tenant, subject not in IDEMGATE_OPS_SUBJECTS",
				"method", r.Method, "path", r.URL.Path)
			writeProblem(w, r, http.StatusForbidden, vocab.CodeForbidden, refusal)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, op)))
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		if _, ok := tenancy.BearerFromHeader(h); ok {
			scoped.ServeHTTP(w, r)
			return
		}
		if scheme, _, _ := strings.Cut(strings.TrimSpace(h), " "); strings.EqualFold(scheme, "basic") {
			client, known := clientAddr(r), false
			if a.Devices != nil && a.Basic != nil {
				var id string
				if id, known = a.Devices.device(r, a.Basic.User()); known {
					client = "device " + id
				}
			}
			if wait, blocked := a.Throttle.blocked(client); blocked {
				logger.WarnContext(r.Context(), "ops: basic attempt throttled", "remote", r.RemoteAddr, "retry_after", wait)
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
				writeProblem(w, r, http.StatusTooManyRequests, vocab.CodeRateLimited,
					"too many failed operator logins from this address; retry after "+wait.Round(time.Second).String())
				return
			}
			user, password, ok := r.BasicAuth()
			if a.Basic != nil && ok && a.Basic.match(user, password) {
				a.Throttle.succeeded(client)
				if a.Devices != nil && !known {
					http.SetCookie(w, a.Devices.issue(a.Basic.User(), r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")))
				}
				op := Operator{Name: a.Basic.User(), Via: ViaBasic, Deployment: true}
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, op)))
				return
			}
			a.Throttle.failed(client)
			// Neither the user tried nor the password is logged: people
			// type passwords into user fields.
			logger.WarnContext(r.Context(), "ops: basic credentials refused",
				"basic_enabled", a.Basic != nil, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		}
		a.challenge(w, r)
	})
}

// challenge answers 401 and says how to authenticate.
func (a *Auth) challenge(w http.ResponseWriter, r *http.Request) {
	if a.Basic != nil {
		w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`"`)
		writeProblem(w, r, http.StatusUnauthorized, vocab.CodeUnauthenticated,
			"operator routes need HTTP Basic credentials or a bearer token with scope "+tenancy.ScopeOpsAdmin)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+Realm+`"`)
	writeProblem(w, r, http.StatusUnauthorized, vocab.CodeUnauthenticated,
		"operator routes need a bearer token with scope "+tenancy.ScopeOpsAdmin+" (Basic credentials are not configured)")
}

// problem is an RFC 9457 problem, shaped as the api's.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	Error    struct {
		Code    vocab.Code `json:"code"`
		Message string     `json:"message"`
	} `json:"error"`
}

func writeProblem(w http.ResponseWriter, r *http.Request, status int, code vocab.Code, detail string) {
	p := problem{Type: "https://idemgate.dev/errors/" + string(code), Title: string(code), Status: status, Detail: detail, Instance: r.URL.Path}
	p.Error.Code, p.Error.Message = code, detail
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}
