package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

// linkPattern is a reset link in a mail's text.
var linkPattern = regexp.MustCompile(`https?://\S+[?&]token=[A-Za-z0-9_-]{43}`)

// mailedLink sends a password-reset mail through the real worker with
// session's token and returns the link of the one mail Mailpit holds for
// it, and the operation.
func mailedLink(t *testing.T, b *workerBundle, token, userID, key string) (string, *vocab.Operation) {
	t.Helper()
	res, isErr := callTool(t, connect(t, b.url, token), "send_password_reset", map[string]any{"user_id": userID, "idempotency_key": key})
	require.False(t, isErr, "%+v", res.Error)
	require.Equal(t, vocab.StatusSucceeded, res.Operation.Status)
	var sent struct {
		MessageID string `json:"message_id"`
	}
	require.NoError(t, json.Unmarshal(res.Operation.Result, &sent))
	var ms []mailpit.Message
	require.Eventually(t, func() bool {
		var err error
		ms, err = b.mail.ByMessageID(t.Context(), sent.MessageID)
		return err == nil && len(ms) == 1
	}, 60*time.Second, 100*time.Millisecond, "one mail with Message-ID %s", sent.MessageID)
	body, err := b.mail.Body(t.Context(), ms[0].ID)
	require.NoError(t, err)
	links := linkPattern.FindAllString(body, -1)
	require.Len(t, links, 1, body)
	return links[0], res.Operation
}

// TestPasswordResetLinkEndToEnd follows the mail: send_password_reset
// through the worker, the link from Mailpit, the page it opens, and the
// redeem its button makes, once. A tenant with its own link base gets
// links to it.
func TestPasswordResetLinkEndToEnd(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 10*time.Second)
	link, op := mailedLink(t, b, tokenAcme, "usr_1", "reset-link-00001")
	require.True(t, strings.HasPrefix(link, b.url+"/reset-password?token="), link)

	resp, err := http.Get(link)
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), `<form id="redeem-form">`)

	token := link[strings.Index(link, "token=")+len("token="):]
	status, body := postRedeem(t, b.url, token)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, map[string]any{"tenant_id": "acme", "user_id": "usr_1", "operation_id": op.OperationID}, body)
	status, body = postRedeem(t, b.url, token)
	require.Equal(t, http.StatusGone, status, body)
	require.Equal(t, vocab.CodeResetTokenUsed, errorCode(body))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM password_reset_tokens WHERE used_at IS NOT NULL`))

	// globex has a base of its own; its token redeems here all the same.
	_, err = pgengine.New(b.pool).Seed(t.Context(), &store.SeedFile{
		Rows:    &tools.Seed{Users: []tools.SeedUser{{Tenant: "globex", UserID: "usr_9", Email: "gil@example.com"}}},
		Tenants: []store.SeedTenant{{Tenant: "globex", ResetLinkBase: "https://app.globex.example/reset?lang=en"}},
	})
	require.NoError(t, err)
	link, op = mailedLink(t, b, tokenGlobex, "usr_9", "reset-link-00002")
	require.True(t, strings.HasPrefix(link, "https://app.globex.example/reset?lang=en&token="), link)
	status, body = postRedeem(t, b.url, link[strings.Index(link, "token=")+len("token="):])
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, map[string]any{"tenant_id": "globex", "user_id": "usr_9", "operation_id": op.OperationID}, body)
}
