package ops

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

const testPassword = "s3cret-operator-password"

func TestBasicIfSet(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		user     string
		password string
		wantErr  string
		wantNil  bool
	}{
		{name: "Unset", wantNil: true},
		{name: "Set", user: "oncall@acme", password: testPassword},
		{name: "UserOnly", user: "oncall", wantErr: "IDEMGATE_OPS_PASSWORD is required when IDEMGATE_OPS_USER is set"},
		{name: "PasswordOnly", password: testPassword, wantErr: "IDEMGATE_OPS_USER is required when IDEMGATE_OPS_PASSWORD is set"},
		{name: "ShortPassword", user: "oncall", password: "short", wantErr: "IDEMGATE_OPS_PASSWORD: must be at least 12 characters"},
		{name: "ControlInPassword", user: "oncall", password: testPassword + "\n", wantErr: "IDEMGATE_OPS_PASSWORD: must not contain control characters"},
		{name: "ColonInUser", user: "on:call", password: testPassword, wantErr: "IDEMGATE_OPS_USER: must be"},
		{name: "SpaceInUser", user: "on call", password: testPassword, wantErr: "IDEMGATE_OPS_USER: must be"},
		{name: "LongUser", user: strings.Repeat("u", MaxOperatorLen+1), password: testPassword, wantErr: "IDEMGATE_OPS_USER: must be"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := BasicIfSet(tt.user, tt.password)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				if tt.password != "" {
					require.NotContains(t, err.Error(), tt.password)
				}
				return
			}
			require.NoError(t, err)
			if tt.wantNil {
				require.Nil(t, c)
				return
			}
			require.Equal(t, tt.user, c.User())
			require.True(t, c.match(tt.user, tt.password))
			require.False(t, c.match(tt.user, tt.password+"x"))
			require.False(t, c.match(tt.user+"x", tt.password))
			require.False(t, c.match("", ""))
			// Never printed or logged.
			var logs bytes.Buffer
			slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "ops", c)
			for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", *c), logs.String()} {
				require.NotContains(t, s, tt.password)
			}
		})
	}
}

func TestValidateOperatorAndReason(t *testing.T) {
	t.Parallel()
	// Operators are named as identity providers name them.
	for _, ok := range []string{"alice", "ops@acme.example", "svc:redrive-bot_1", "a+b", "auth0|64f1c2", "Zoë Åström",
		strings.Repeat("a", MaxOperatorLen+1)} {
		require.NoError(t, ValidateOperator(ok), ok)
	}
	for _, bad := range []string{"", " alice", "a\nb", strings.Repeat("a", 256)} {
		require.Error(t, ValidateOperator(bad), bad)
	}
	for _, ok := range []string{"stripe outage over", "card fixed — INC-42", strings.Repeat("r", MaxReasonLen)} {
		require.NoError(t, ValidateReason(ok), ok)
	}
	for _, bad := range []string{"", "two\nlines", "tab\there", "\x00", strings.Repeat("r", MaxReasonLen+1), string([]byte{0xff})} {
		require.Error(t, ValidateReason(bad), bad)
	}
}

// fakeBearer plays the api's authenticate: "Bearer valid" passes without
// an actor of ops:admin (the api's real tokens are exercised in app's
// tests), anything else is 401.
func fakeBearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer valid" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func TestAuthMiddleware(t *testing.T) {
	t.Parallel()
	basic, err := NewBasicCredentials("oncall", testPassword)
	require.NoError(t, err)
	logger, logs := logtest.New()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, ok := OperatorFromContext(r.Context())
		if !ok {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s/%s/%s", op.Via, op.Name, op.TenantID)
	})
	withBasic := (&Auth{Bearer: fakeBearer, Basic: basic, Logger: logger}).Middleware(echo)
	bearerOnly := (&Auth{Bearer: fakeBearer, Logger: logger}).Middleware(echo)

	t.Run("Cases", func(t *testing.T) {
		for _, tt := range []struct {
			name          string
			handler       http.Handler
			authorization string
			wantStatus    int
			wantBody      string
			wantChallenge string
		}{
			{"None", withBasic, "", http.StatusUnauthorized, "", `Basic realm="idemgate ops"`},
			{"NoneBearerOnly", bearerOnly, "", http.StatusUnauthorized, "", `Bearer realm="idemgate ops"`},
			{"Basic", withBasic, basicHeader("oncall", testPassword), http.StatusOK, "basic/oncall/", ""},
			{"BasicLowercaseScheme", withBasic, "basic " + strings.TrimPrefix(basicHeader("oncall", testPassword), "Basic "), http.StatusOK, "basic/oncall/", ""},
			{"BasicWrongPassword", withBasic, basicHeader("oncall", "nope"), http.StatusUnauthorized, "", `Basic realm="idemgate ops"`},
			{"BasicWrongUser", withBasic, basicHeader("root", testPassword), http.StatusUnauthorized, "", `Basic realm="idemgate ops"`},
			{"BasicMalformed", withBasic, "Basic !!!", http.StatusUnauthorized, "", `Basic realm="idemgate ops"`},
			{"BasicWhenDisabled", bearerOnly, basicHeader("oncall", testPassword), http.StatusUnauthorized, "", `Bearer realm="idemgate ops"`},
			{"BearerWithoutOpsAdmin", withBasic, "Bearer valid", http.StatusForbidden, "", ""},
			{"BearerUnknown", withBasic, "Bearer nope", http.StatusUnauthorized, "", ""},
			{"BearerWithoutToken", withBasic, "Bearer ", http.StatusUnauthorized, "", `Basic realm="idemgate ops"`},
			{"OtherScheme", withBasic, "Digest abc", http.StatusUnauthorized, "", `Basic realm="idemgate ops"`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				req := httptest.NewRequest(http.MethodGet, "/ops/riverui/", nil)
				if tt.authorization != "" {
					req.Header.Set("Authorization", tt.authorization)
				}
				rec := httptest.NewRecorder()
				tt.handler.ServeHTTP(rec, req)
				require.Equal(t, tt.wantStatus, rec.Code, rec.Body.String())
				if tt.wantBody != "" {
					require.Equal(t, tt.wantBody, rec.Body.String())
				}
				require.Equal(t, tt.wantChallenge, rec.Header().Get("WWW-Authenticate"))
			})
		}
	})
	require.NotContains(t, logs.String(), testPassword)
	require.Contains(t, logs.String(), "basic credentials refused")
	require.Contains(t, logs.String(), "without scope ops:admin")
}

func basicHeader(user, password string) string {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, password)
	return r.Header.Get("Authorization")
}

// actorBearer plays the api's authenticate for the operator rules: the
// token "Bearer <name>" is the actor of that name in actors.
func actorBearer(actors map[string]vocab.Actor) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			actor, ok := actors[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
			if !ok {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(tenancy.WithActor(r.Context(), actor)))
		})
	}
}

// TestAuthOperatorRules: who is the deployment's operator. An OAuth access
// token is one only when IDEMGATE_OPS_SUBJECTS lists its subject; one
// whose tenant claim is the operator tenant without that is refused
// outright (403, WARN naming the subject); idemgate's own tokens of the
// operator tenant remain operator credentials.
func TestAuthOperatorRules(t *testing.T) {
	t.Parallel()
	const issuer = "https://id.example.com"
	admin := []string{tenancy.ScopeOpsAdmin}
	actors := map[string]vocab.Actor{
		"opaque-ops":        {TenantID: "ops", UserID: "oncall-ana", TokenID: "tok_1", Scopes: admin},
		"opaque-acme":       {TenantID: "acme", UserID: "acme-lead", TokenID: "tok_2", Scopes: admin},
		"oauth-ops-listed":  {TenantID: "ops", UserID: "ana@example.com", Scopes: admin, Issuer: issuer, Subject: "sub-ana"},
		"oauth-acme-listed": {TenantID: "acme", UserID: "ana@example.com", Scopes: admin, Issuer: issuer, Subject: "sub-ana"},
		"oauth-ops-other":   {TenantID: "ops", UserID: "mallory", Scopes: admin, Issuer: issuer, Subject: "sub-mallory"},
		"oauth-acme-other":  {TenantID: "acme", UserID: "mallory", Scopes: admin, Issuer: issuer, Subject: "sub-mallory"},
		"oauth-other-iss":   {TenantID: "ops", UserID: "ana", Scopes: admin, Issuer: "https://other.example.com", Subject: "sub-bo"},
		"oauth-ops-noscope": {TenantID: "ops", UserID: "ana@example.com", Issuer: issuer, Subject: "sub-ana"},
	}
	logger, logs := logtest.New()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, _ := OperatorFromContext(r.Context())
		fmt.Fprintf(w, "%s/%s/%s/%v", op.Via, op.Name, op.TenantID, op.Deployment)
	})
	h := (&Auth{Bearer: actorBearer(actors), OperatorTenant: "ops", Logger: logger,
		OperatorSubjects: []OperatorSubject{{Subject: "sub-ana"}, {Issuer: issuer, Subject: "sub-bo"}}}).Middleware(echo)
	for _, tt := range []struct {
		token      string
		wantStatus int
		wantBody   string
	}{
		{"opaque-ops", http.StatusOK, "bearer/oncall-ana/ops/true"},
		{"opaque-acme", http.StatusOK, "bearer/acme-lead/acme/false"},
		{"oauth-ops-listed", http.StatusOK, "oauth/ana@example.com/ops/true"},
		{"oauth-acme-listed", http.StatusOK, "oauth/ana@example.com/acme/true"},
		{"oauth-ops-other", http.StatusForbidden, "its subject is not an operator's"},
		{"oauth-acme-other", http.StatusOK, "oauth/mallory/acme/false"},
		// sub-bo is listed for another issuer only.
		{"oauth-other-iss", http.StatusForbidden, "IDEMGATE_OPS_SUBJECTS"},
		{"oauth-ops-noscope", http.StatusForbidden, "scope ops:admin"},
	} {
		t.Run(tt.token, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/ops/riverui/", nil)
			req.Header.Set("Authorization", "Bearer "+tt.token)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, tt.wantStatus, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tt.wantBody)
			if tt.wantStatus == http.StatusForbidden {
				require.Contains(t, rec.Body.String(), `"code":"forbidden"`)
			}
		})
	}
	require.Contains(t, logs.String(), "not an operator")
	require.Contains(t, logs.String(), `"subject":"sub-mallory"`)
	require.Contains(t, logs.String(), "subject not in IDEMGATE_OPS_SUBJECTS")
}

func TestOperatorChannel(t *testing.T) {
	t.Parallel()
	require.Equal(t, "riverui (oauth)", Operator{Name: "ana", Via: ViaOAuth}.Channel(ChannelRiverUI))
	require.Equal(t, "/ops/redrive (basic)", Operator{Name: "oncall", Via: ViaBasic}.Channel(ChannelRedrive))
}
