package mailpit_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/smtp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/mailpit"
)

// send delivers a plain-text message over SMTP with the standard library,
// so that this package's tests do not depend on the mailer under test.
func send(t *testing.T, smtpAddr, messageID, to, subject, body string) {
	t.Helper()
	msg := strings.Join([]string{
		"From: Tests <tests@idemgate.test>",
		"To: " + to,
		"Subject: " + subject,
		"Message-ID: " + messageID,
		"Date: " + time.Now().Format(time.RFC1123Z),
		"MIME-Version: 1.0",
		"Content-Type: text/plain; charset=utf-8",
		"",
		body,
		"",
	}, "\r\n")
	if err := smtp.SendMail(smtpAddr, nil, "tests@idemgate.test", []string{to}, []byte(msg)); err != nil {
		t.Fatalf("SendMail: %v", err)
	}
}

func uniq() string { return strings.ToLower(rand.Text()[:16]) }

func TestFindByMessageID(t *testing.T) {
	t.Parallel()
	smtpAddr, apiURL := mailpit.Start(t)
	c := mailpit.New(apiURL)
	ctx := t.Context()

	// Mailpit's message-id: search matches substrings; ByMessageID must
	// keep exact matches only, so send an ID that contains the other.
	key := "idg_" + uniq() + "_1"
	id := "<" + key + "@idemgate.test>"
	longer := "<x" + key + "0@idemgate.test>"
	to := "ana-" + uniq() + "@example.com"
	send(t, smtpAddr, id, to, "hello", "first body line\nsecond")
	send(t, smtpAddr, longer, to, "other", "other body")

	for _, form := range []string{id, strings.Trim(id, "<>")} {
		n, err := c.CountByMessageID(ctx, form)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("CountByMessageID(%q) = %d, want 1", form, n)
		}
	}

	ms, err := c.ByMessageID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("ByMessageID = %d messages, want 1", len(ms))
	}
	m := ms[0]
	if m.MessageID != strings.Trim(id, "<>") || m.Subject != "hello" ||
		m.From.Address != "tests@idemgate.test" || m.From.Name != "Tests" ||
		len(m.To) != 1 || m.To[0].Address != to || m.ID == "" {
		t.Errorf("message = %+v", m)
	}
	if age := time.Since(m.Created); age < -time.Minute || age > time.Minute {
		t.Errorf("Created = %v, %v ago", m.Created, age)
	}

	body, err := c.Body(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "first body line") {
		t.Errorf("Body = %q", body)
	}
	h, err := c.Headers(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := h["Message-Id"]; len(got) != 1 || got[0] != id {
		t.Errorf("Message-Id header = %q, want %q", got, id)
	}

	all, err := c.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen int
	for _, x := range all {
		if x.MessageID == strings.Trim(id, "<>") || x.MessageID == strings.Trim(longer, "<>") {
			seen++
		}
	}
	if seen != 2 {
		t.Errorf("Messages lists %d of the 2 sent messages (of %d in all)", seen, len(all))
	}

	if n, err := c.CountByMessageID(ctx, "<idg_"+uniq()+"@idemgate.test>"); err != nil || n != 0 {
		t.Errorf("CountByMessageID(unknown) = %d, %v; want 0, nil", n, err)
	}
	if _, err := c.Body(ctx, "no-such-id"); err == nil {
		t.Error("Body(no-such-id): no error")
	}
}

// TestPagingAndDeleteAll uses a private Mailpit: it deletes everything.
func TestPagingAndDeleteAll(t *testing.T) {
	t.Parallel()
	smtpAddr, apiURL := mailpit.StartPrivate(t)
	c := mailpit.New(apiURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	const n = 260 // more than one page
	for i := range n {
		send(t, smtpAddr, fmt.Sprintf("<page-%d@idemgate.test>", i), "bob@example.com", "page", "body")
	}
	all, err := c.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("Messages = %d, want %d", len(all), n)
	}
	ids := map[string]bool{}
	for _, m := range all {
		ids[m.MessageID] = true
	}
	if len(ids) != n {
		t.Errorf("%d distinct Message-IDs, want %d", len(ids), n)
	}
	found, err := c.Search(ctx, "to:bob@example.com")
	if err != nil || len(found) != n {
		t.Errorf("Search(to:) = %d, %v; want %d", len(found), err, n)
	}

	if err := c.DeleteAll(ctx); err != nil {
		t.Fatal(err)
	}
	all, err = c.Messages(ctx)
	if err != nil || len(all) != 0 {
		t.Errorf("after DeleteAll: %d messages, %v", len(all), err)
	}
}

// TestStartUsesEnv: with both variables set, Start returns them and starts
// nothing.
func TestStartUsesEnv(t *testing.T) {
	t.Setenv(mailpit.EnvSMTPAddr, "127.0.0.1:1")
	t.Setenv(mailpit.EnvAPIURL, "http://127.0.0.1:2")
	s, a := mailpit.Start(t)
	if s != "127.0.0.1:1" || a != "http://127.0.0.1:2" {
		t.Errorf("Start = %q, %q", s, a)
	}
}
