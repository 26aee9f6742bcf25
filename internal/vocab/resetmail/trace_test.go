package resetmail_test

import (
	"errors"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

func TestSendIsASpan(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	// Refused before dialing: nothing listens at the address.
	s := newSender(t, "127.0.0.1:1", func(c *resetmail.SenderConfig) { c.TracerProvider = tp })
	ctx, parent := tp.Tracer("test").Start(t.Context(), "job")
	_, err := s.Send(ctx, &resetmail.Mail{To: "not an address", UserID: "usr_1", DownstreamKey: newKey(), Token: "t"})
	parent.End()
	if !errors.Is(err, resetmail.ErrInvalidMail) {
		t.Fatalf("Send = %v, want ErrInvalidMail", err)
	}
	var found bool
	for _, sp := range rec.Ended() {
		if sp.Name() != "smtp.send" {
			continue
		}
		found = true
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("smtp.send's parent = %v, want the job's span", sp.Parent().SpanID())
		}
		if sp.Status().Code != codes.Error {
			t.Errorf("smtp.send's status = %v, want Error", sp.Status())
		}
	}
	if !found {
		t.Fatal("no smtp.send span")
	}
}

func TestSentMailIsASpanNamingTheMessage(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	smtpAddr, _ := mailpit.Start(t)
	s := newSender(t, smtpAddr, func(c *resetmail.SenderConfig) { c.TracerProvider = tp })
	key := newKey()
	sent, err := s.Send(t.Context(), &resetmail.Mail{To: "ana@example.com", UserID: "usr_1", DownstreamKey: key, Token: resetmail.Token(secret, key)})
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "smtp.send" {
		t.Fatalf("spans = %v, want one smtp.send", spans)
	}
	want := attribute.String("smtp.message_id", sent.MessageID)
	if !slices.Contains(spans[0].Attributes(), want) || spans[0].Status().Code == codes.Error {
		t.Errorf("smtp.send: attributes %v, status %v; want %v and no error", spans[0].Attributes(), spans[0].Status(), want)
	}
}
