package resetmail_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/smtptest"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

func TestToken(t *testing.T) {
	t.Parallel()
	secret := []byte("test-secret")
	key := "idg_00000000-0000-0000-0000-000000000001_0"

	// Computed independently:
	// printf %s KEY | openssl dgst -sha256 -hmac test-secret -binary | base64 | tr +/ -_ | tr -d =
	const want = "_yfe-qaG_0e8ECmsuZczp-U1dyTM5K2AXhOHRlgMFlQ"
	if got := resetmail.Token(secret, key); got != want {
		t.Errorf("Token = %q, want %q", got, want)
	}
	// A resend computes the token again, maybe in another process: an equal
	// secret and key (other slices and strings) give the same token.
	if got := resetmail.Token([]byte("test-secret"), strings.Clone(key)); got != want {
		t.Errorf("Token is not deterministic: a second computation = %q, want %q", got, want)
	}
	if resetmail.Token(secret, key) == resetmail.Token(secret, "idg_00000000-0000-0000-0000-000000000001_1") {
		t.Error("Token is the same for two generations of one operation")
	}
	if resetmail.Token(secret, key) == resetmail.Token([]byte("other-secret"), key) {
		t.Error("Token is the same under two secrets")
	}

	if !resetmail.WellFormed(want) || len(want) != resetmail.TokenLen {
		t.Errorf("WellFormed(%q) = false", want)
	}
	for _, bad := range []string{"", want[1:], want + "A", want[1:] + "=", want[1:] + "+", want[1:] + "/", want[1:] + " "} {
		if resetmail.WellFormed(bad) {
			t.Errorf("WellFormed(%q) = true", bad)
		}
	}

	if got := hex.EncodeToString(resetmail.TokenHash("abc")); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("TokenHash(abc) = %s", got)
	}
}

func TestMessageID(t *testing.T) {
	t.Parallel()
	if got := resetmail.MessageID("idg_x_0", "example.com"); got != "<idg_x_0@example.com>" {
		t.Errorf("MessageID = %q", got)
	}
}

func TestNewSender(t *testing.T) {
	t.Parallel()
	ok := resetmail.SenderConfig{Addr: "127.0.0.1:1025", From: "Idemgate <no-reply@mail.example.com>", LinkBase: "http://127.0.0.1:8080/reset"}
	s, err := resetmail.NewSender(&ok)
	if err != nil {
		t.Fatal(err)
	}
	if s.Domain() != "mail.example.com" {
		t.Errorf("default Domain = %q, want the From address's", s.Domain())
	}
	if got := s.Link("abc-_"); got != "http://127.0.0.1:8080/reset?token=abc-_" {
		t.Errorf("Link = %q", got)
	}
	q := ok
	q.LinkBase = "https://app.example.com/reset?lang=en"
	if s, err := resetmail.NewSender(&q); err != nil || s.Link("t") != "https://app.example.com/reset?lang=en&token=t" {
		t.Errorf("Link with a query: %v", err)
	}

	for _, tc := range []struct {
		name string
		edit func(*resetmail.SenderConfig)
		want string
	}{
		{"no port", func(c *resetmail.SenderConfig) { c.Addr = "127.0.0.1" }, "SMTP_ADDR"},
		{"bad port", func(c *resetmail.SenderConfig) { c.Addr = "127.0.0.1:0" }, "SMTP_ADDR"},
		{"no from", func(c *resetmail.SenderConfig) { c.From = "" }, "MAIL_FROM"},
		{"bad from", func(c *resetmail.SenderConfig) { c.From = "not an address" }, "MAIL_FROM"},
		{"bad domain", func(c *resetmail.SenderConfig) { c.Domain = "a b" }, "Domain"},
		{"relative link", func(c *resetmail.SenderConfig) { c.LinkBase = "/reset" }, "LinkBase"},
		{"all-interfaces link", func(c *resetmail.SenderConfig) { c.LinkBase = "http://0.0.0.0:8080/reset" }, "0.0.0.0"},
		{"negative timeout", func(c *resetmail.SenderConfig) { c.Timeout = -time.Second }, "Timeout"},
	} {
		c := ok
		tc.edit(&c)
		if _, err := resetmail.NewSender(&c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one naming %s", tc.name, err, tc.want)
		}
	}
}

// newKey returns a fresh downstream key, so tests sharing a Mailpit find
// their own messages.
func newKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	h := hex.EncodeToString(b)
	return "idg_" + h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] + "_0"
}

func newSender(t *testing.T, addr string, edit ...func(*resetmail.SenderConfig)) *resetmail.Sender {
	t.Helper()
	cfg := &resetmail.SenderConfig{
		Addr:     addr,
		From:     "Idemgate <no-reply@idemgate.test>",
		LinkBase: "http://127.0.0.1:8080/reset",
		Timeout:  5 * time.Second,
	}
	for _, e := range edit {
		e(cfg)
	}
	s, err := resetmail.NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var secret = []byte("0123456789abcdef0123456789abcdef")

func TestSendArrivesOnce(t *testing.T) {
	t.Parallel()
	smtpAddr, apiURL := mailpit.Start(t)
	mp := mailpit.New(apiURL)
	s := newSender(t, smtpAddr)
	ctx := t.Context()

	key := newKey()
	token := resetmail.Token(secret, key)
	sent, err := s.Send(ctx, &resetmail.Mail{To: "Ana <ana@example.com>", UserID: "usr_1", DownstreamKey: key, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	wantID := "<" + key + "@idemgate.test>"
	if sent.MessageID != wantID || sent.MessageID != resetmail.MessageID(key, s.Domain()) {
		t.Errorf("Sent.MessageID = %q, want %q", sent.MessageID, wantID)
	}
	if time.Since(sent.SentAt) > time.Minute || sent.SentAt.After(time.Now()) {
		t.Errorf("Sent.SentAt = %v", sent.SentAt)
	}
	if !strings.Contains(sent.Response, "queued") {
		t.Errorf("Sent.Response = %q", sent.Response)
	}

	ms, err := mp.ByMessageID(ctx, sent.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("%d messages with Message-ID %s, want 1", len(ms), sent.MessageID)
	}
	m := ms[0]
	if m.Subject != resetmail.Subject || m.From.Address != "no-reply@idemgate.test" ||
		len(m.To) != 1 || m.To[0].Address != "ana@example.com" || m.Username != "" {
		t.Errorf("message = %+v", m)
	}
	h, err := mp.Headers(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := h["Message-Id"]; len(got) != 1 || got[0] != wantID {
		t.Errorf("Message-ID header = %q, want %q", got, wantID)
	}
	body, err := mp.Body(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	link := "http://127.0.0.1:8080/reset?token=" + token
	if !strings.Contains(body, link) {
		t.Errorf("body lacks the link %s:\n%s", link, body)
	}
}

// TestSendWithTheMailsLinkBase: a mail's own link base (a tenant's page)
// replaces the Sender's.
func TestSendWithTheMailsLinkBase(t *testing.T) {
	t.Parallel()
	smtpAddr, apiURL := mailpit.Start(t)
	mp := mailpit.New(apiURL)
	s := newSender(t, smtpAddr)
	key := newKey()
	token := resetmail.Token(secret, key)
	sent, err := s.Send(t.Context(), &resetmail.Mail{To: "dan@example.com", UserID: "usr_3", DownstreamKey: key, Token: token,
		LinkBase: "https://app.example.com/reset?lang=en"})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := mp.ByMessageID(t.Context(), sent.MessageID)
	if err != nil || len(ms) != 1 {
		t.Fatalf("ByMessageID = %d, %v; want 1 message", len(ms), err)
	}
	body, err := mp.Body(t.Context(), ms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if link := "https://app.example.com/reset?lang=en&token=" + token; !strings.Contains(body, link) {
		t.Errorf("body lacks the link %s:\n%s", link, body)
	}
	if strings.Contains(body, s.Link(token)) {
		t.Errorf("body has the Sender's link too:\n%s", body)
	}
}

// TestSendTwiceSameMessageID documents that SMTP cannot deduplicate: two
// sends of one key are two messages, with the same Message-ID and link.
func TestSendTwiceSameMessageID(t *testing.T) {
	t.Parallel()
	smtpAddr, apiURL := mailpit.Start(t)
	mp := mailpit.New(apiURL)
	s := newSender(t, smtpAddr)
	ctx := t.Context()

	key := newKey()
	mail := &resetmail.Mail{To: "bob@example.com", UserID: "usr_2", DownstreamKey: key, Token: resetmail.Token(secret, key)}
	first, err := s.Send(ctx, mail)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Send(ctx, mail)
	if err != nil {
		t.Fatal(err)
	}
	if first.MessageID != second.MessageID {
		t.Errorf("Message-IDs differ: %s, %s", first.MessageID, second.MessageID)
	}
	ms, err := mp.ByMessageID(ctx, first.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("%d messages with Message-ID %s, want 2", len(ms), first.MessageID)
	}
	if ms[0].ID == ms[1].ID {
		t.Error("the two messages have one Mailpit ID")
	}
	for _, m := range ms {
		body, err := mp.Body(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(body, s.Link(mail.Token)) {
			t.Errorf("message %s lacks the link", m.ID)
		}
	}
}

func TestSendWithAuth(t *testing.T) {
	t.Parallel()
	// Mailpit accepts any credentials (scripts/services.sh and
	// StartPrivate start it so), over plain SMTP on loopback.
	smtpAddr, apiURL := mailpit.Start(t)
	s := newSender(t, smtpAddr, func(c *resetmail.SenderConfig) { c.Username, c.Password = "idemgate", "secret" })
	key := newKey()
	sent, err := s.Send(t.Context(), &resetmail.Mail{To: "carol@example.com", DownstreamKey: key, Token: resetmail.Token(secret, key)})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := mailpit.New(apiURL).ByMessageID(t.Context(), sent.MessageID)
	if err != nil || len(ms) != 1 {
		t.Fatalf("ByMessageID = %d, %v; want 1 message", len(ms), err)
	}
	if ms[0].Username != "idemgate" {
		t.Errorf("authenticated as %q, want idemgate", ms[0].Username)
	}
}

func TestInvalidMailIsPermanent(t *testing.T) {
	t.Parallel()
	s := newSender(t, "127.0.0.1:1") // never dialled
	for _, m := range []*resetmail.Mail{
		{To: "not-an-address", DownstreamKey: "idg_x_0", Token: "t"},
		{To: "a@example.com\r\nBcc: x@example.com", DownstreamKey: "idg_x_0", Token: "t"},
		{To: "a@example.com", DownstreamKey: "", Token: "t"},
		{To: "a@example.com", DownstreamKey: "idg x>", Token: "t"},
		{To: "a@example.com", DownstreamKey: "idg_x_0", Token: ""},
		{To: "a@example.com", DownstreamKey: "idg_x_0", Token: "t", LinkBase: "javascript:alert(1)"},
		{To: "a@example.com", DownstreamKey: "idg_x_0", Token: "t", LinkBase: "http://[::]:8080/reset"},
	} {
		_, err := s.Send(t.Context(), m)
		if !errors.Is(err, resetmail.ErrInvalidMail) || !resetmail.Permanent(err) {
			t.Errorf("Send(%+v) = %v, want a permanent ErrInvalidMail", m, err)
		}
	}
}

// TestServerRefusals runs a private Mailpit whose chaos triggers refuse
// every recipient (550) or sender (451).
func TestServerRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		trigger   string
		code      int
		permanent bool
	}{
		{"Recipient:550:100", 550, true},
		{"Sender:451:100", 451, false},
	} {
		t.Run(tc.trigger, func(t *testing.T) {
			t.Parallel()
			smtpAddr, apiURL := mailpit.StartPrivate(t, "--chaos-triggers", tc.trigger)
			s := newSender(t, smtpAddr)
			key := newKey()
			_, err := s.Send(t.Context(), &resetmail.Mail{To: "dave@example.com", DownstreamKey: key, Token: resetmail.Token(secret, key)})
			if err == nil {
				t.Fatal("Send succeeded")
			}
			var se *resetmail.SendError
			if !errors.As(err, &se) || se.Code != tc.code || se.Stage != "sending" {
				t.Fatalf("err = %#v, want a *SendError with code %d while sending", err, tc.code)
			}
			if resetmail.Permanent(err) != tc.permanent || resetmail.OutcomeUnknown(err) {
				t.Errorf("Permanent = %v, OutcomeUnknown = %v for %v", resetmail.Permanent(err), resetmail.OutcomeUnknown(err), err)
			}
			if strings.Contains(err.Error(), "dave@example.com") {
				t.Errorf("error names the recipient: %v", err)
			}
			if !strings.Contains(err.Error(), "<"+key+"@idemgate.test>") || !strings.Contains(err.Error(), smtpAddr) {
				t.Errorf("error names neither the Message-ID nor the server: %v", err)
			}
			if n, err := mailpit.New(apiURL).CountByMessageID(t.Context(), "<"+key+"@idemgate.test>"); err != nil || n != 0 {
				t.Errorf("%d messages stored (%v), want 0", n, err)
			}
		})
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	s := newSender(t, closedPort(t), func(c *resetmail.SenderConfig) { c.Timeout = 2 * time.Second })
	start := time.Now()
	_, err := s.Send(t.Context(), &resetmail.Mail{To: "erin@example.com", DownstreamKey: "idg_x_0", Token: "t"})
	if err == nil {
		t.Fatal("Send to a closed port succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Send took %v, beyond its 2s timeout", d)
	}
	var se *resetmail.SendError
	if !errors.As(err, &se) || se.Stage != "connecting" || se.Code != 0 {
		t.Errorf("err = %#v, want a *SendError while connecting, without a code", err)
	}
	if resetmail.Permanent(err) || resetmail.OutcomeUnknown(err) {
		t.Errorf("unreachable server: Permanent = %v, OutcomeUnknown = %v", resetmail.Permanent(err), resetmail.OutcomeUnknown(err))
	}
}

func TestSilentServerTimesOut(t *testing.T) {
	t.Parallel()
	addr := smtptest.Start(t, smtptest.Silent)
	s := newSender(t, addr, func(c *resetmail.SenderConfig) { c.Timeout = 300 * time.Millisecond })
	start := time.Now()
	_, err := s.Send(t.Context(), &resetmail.Mail{To: "finn@example.com", DownstreamKey: "idg_x_0", Token: "t"})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Send took %v with a 300ms timeout", d)
	}
	if err == nil || resetmail.Permanent(err) || resetmail.OutcomeUnknown(err) {
		t.Errorf("silent server: err = %v, Permanent = %v, OutcomeUnknown = %v; want a transient error",
			err, resetmail.Permanent(err), resetmail.OutcomeUnknown(err))
	}

	// The caller's deadline bounds Send too, when it is the sooner one.
	s = newSender(t, addr, func(c *resetmail.SenderConfig) { c.Timeout = time.Minute })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = s.Send(ctx, &resetmail.Mail{To: "finn@example.com", DownstreamKey: "idg_x_0", Token: "t"})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Send took %v with a 300ms context deadline", d)
	}
	if err == nil || resetmail.Permanent(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context deadline: err = %v, want a transient error wrapping context.DeadlineExceeded", err)
	}
}

// TestUnansweredMessageIsUnknown: the whole message was written and no
// answer came, so the server may have queued it.
func TestUnansweredMessageIsUnknown(t *testing.T) {
	t.Parallel()
	addr := smtptest.Start(t, smtptest.Swallow)
	s := newSender(t, addr, func(c *resetmail.SenderConfig) { c.Timeout = 500 * time.Millisecond })
	start := time.Now()
	_, err := s.Send(t.Context(), &resetmail.Mail{To: "gil@example.com", DownstreamKey: "idg_x_0", Token: "t"})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Send took %v with a 500ms timeout", d)
	}
	if err == nil || !resetmail.OutcomeUnknown(err) || resetmail.Permanent(err) {
		t.Errorf("err = %v, OutcomeUnknown = %v, Permanent = %v; want an unknown, transient outcome",
			err, resetmail.OutcomeUnknown(err), resetmail.Permanent(err))
	}
}

// TestSendMessageToManyArrivesOnce: a message of another kind goes to all
// its recipients as one message, with the Message-ID of its key.
func TestSendMessageToManyArrivesOnce(t *testing.T) {
	t.Parallel()
	smtpAddr, apiURL := mailpit.Start(t)
	mp := mailpit.New(apiURL)
	s := newSender(t, smtpAddr)
	ctx := t.Context()

	key := "idg_note_" + newKey()
	sent, err := s.SendMessage(ctx, &resetmail.Message{To: []string{"finance@example.com", "CFO <cfo@example.com>"},
		Subject: "A note", Body: "Hello,\r\nthis is a note.\r\n", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if want := resetmail.MessageID(key, s.Domain()); sent.MessageID != want {
		t.Errorf("Sent.MessageID = %q, want %q", sent.MessageID, want)
	}
	ms, err := mp.ByMessageID(ctx, sent.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("%d messages with Message-ID %s, want 1", len(ms), sent.MessageID)
	}
	m := ms[0]
	if m.Subject != "A note" || m.From.Address != "no-reply@idemgate.test" || len(m.To) != 2 ||
		m.To[0].Address != "finance@example.com" || m.To[1].Address != "cfo@example.com" {
		t.Errorf("message = %+v", m)
	}
	body, err := mp.Body(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "this is a note.") {
		t.Errorf("body = %q", body)
	}
}

func TestInvalidMessageIsPermanent(t *testing.T) {
	t.Parallel()
	s := newSender(t, "127.0.0.1:1") // never dialled
	for _, m := range []*resetmail.Message{
		nil,
		{Key: "idg_x"},
		{To: []string{"a@example.com", "not-an-address"}, Key: "idg_x"},
		{To: []string{"a@example.com\r\nBcc: x@example.com"}, Key: "idg_x"},
		{To: []string{"a@example.com"}, Key: ""},
		{To: []string{"a@example.com"}, Key: "idg x>"},
	} {
		_, err := s.SendMessage(t.Context(), m)
		if !errors.Is(err, resetmail.ErrInvalidMail) || !resetmail.Permanent(err) {
			t.Errorf("SendMessage(%+v) = %v, want a permanent ErrInvalidMail", m, err)
		}
		if err != nil && strings.Contains(err.Error(), "not-an-address") {
			t.Errorf("error names a recipient: %v", err)
		}
	}
}
