package resetmail

import (
	"context"
	"errors"
	"fmt"
	"net"
	netmail "net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/telemetry"

	"github.com/idemgate/idemgate/internal/vocab"
)

// Subject is the subject of every password-reset mail.
const Subject = "Reset your password"

// DefaultTimeout bounds one Send when SenderConfig.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Addr is the SMTP server as host:port (SMTP_ADDR). Plain SMTP without
	// TLS is used only when host is a loopback address or "localhost";
	// any other host gets STARTTLS whenever it offers it.
	Addr string
	// From is the sender (MAIL_FROM), a bare address or "Name <address>".
	From string
	// Domain is the right part of the Message-ID; empty means the domain of
	// From's address.
	Domain string
	// LinkBase is the absolute http(s) URL of the reset page, such as
	// "http://127.0.0.1:8080/reset-password" (vocab.CheckLinkBase); the
	// mail links to LinkBase?token=… unless the Mail has a base of its own.
	LinkBase string
	// Timeout bounds one Send, connecting included, and each SMTP command
	// within it; zero means DefaultTimeout.
	Timeout time.Duration
	// Username and Password, when either is set, authenticate to the server
	// (SCRAM, CRAM-MD5, PLAIN or LOGIN, whichever it offers, in that order;
	// PLAIN and LOGIN only over TLS or to a loopback server). When both are
	// empty no authentication is attempted.
	Username string
	Password string
	// TracerProvider receives a client span per Send (smtp.send). Nil or a
	// no-op provider: none.
	TracerProvider trace.TracerProvider
}

// Sender sends password-reset mail (Send), and plain-text messages of other
// kinds, such as approval notices, on the same settings (SendMessage). It
// holds no connection: each send dials, sends one message and quits, so a
// Sender is safe for concurrent use.
type Sender struct {
	host, addr string
	port       int
	loopback   bool
	from       *netmail.Address
	domain     string
	linkBase   string
	timeout    time.Duration
	user, pass string
	tracer     telemetry.Tracer
}

// atomRE is what a downstream key (the Message-ID's left part) and the
// domain may contain: letters, digits and . _ + -, with no empty dot-separated
// part.
var atomRE = regexp.MustCompile(`^[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*$`)

// NewSender validates cfg. Its errors name the setting at fault.
func NewSender(cfg *SenderConfig) (*Sender, error) {
	if cfg == nil {
		return nil, errors.New("resetmail: no SenderConfig")
	}
	s := &Sender{addr: cfg.Addr, timeout: cfg.Timeout, user: cfg.Username, pass: cfg.Password,
		tracer: telemetry.NewTracer(cfg.TracerProvider, "github.com/idemgate/idemgate/internal/vocab/resetmail")}

	host, portStr, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("resetmail: SMTP address (SMTP_ADDR) %q: want host:port: %v", cfg.Addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return nil, fmt.Errorf("resetmail: SMTP address (SMTP_ADDR) %q: want host:port with a port from 1 to 65535", cfg.Addr)
	}
	s.host, s.port = host, port
	s.loopback = isLoopback(host)

	if strings.TrimSpace(cfg.From) == "" {
		return nil, errors.New("resetmail: sender address (MAIL_FROM) is empty")
	}
	s.from, err = netmail.ParseAddress(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("resetmail: sender address (MAIL_FROM) %q: %v", cfg.From, err)
	}

	s.domain = cfg.Domain
	if s.domain == "" {
		s.domain = s.from.Address[strings.LastIndexByte(s.from.Address, '@')+1:]
	}
	if !atomRE.MatchString(s.domain) {
		return nil, fmt.Errorf("resetmail: Message-ID domain %q (SenderConfig.Domain, or the domain of MAIL_FROM) is not a plain domain name", s.domain)
	}

	if err := vocab.CheckLinkBase(cfg.LinkBase); err != nil {
		return nil, fmt.Errorf("resetmail: reset link base (SenderConfig.LinkBase) %q %v", cfg.LinkBase, err)
	}
	s.linkBase = cfg.LinkBase

	if s.timeout < 0 {
		return nil, fmt.Errorf("resetmail: SMTP timeout (SenderConfig.Timeout) %v is negative", s.timeout)
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	return s, nil
}

// isLoopback reports whether host names this machine: "localhost" or a
// loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Domain is the right part of the Message-IDs this Sender writes.
func (s *Sender) Domain() string { return s.domain }

// Link returns the reset link for token: LinkBase?token=TOKEN (or
// &token=TOKEN when LinkBase already has a query).
func (s *Sender) Link(token string) string { return link(s.linkBase, token) }

func link(base, token string) string {
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "token=" + url.QueryEscape(token)
}

// Mail is one password-reset mail to send.
type Mail struct {
	// To is the recipient, a bare address or "Name <address>".
	To string
	// UserID is the account the reset is for. It is not written into the
	// mail; it names the account in errors.
	UserID string
	// DownstreamKey is the claim's downstream key: the Message-ID's left
	// part.
	DownstreamKey string
	// Token is Token(secret, DownstreamKey), the token the link carries.
	Token string
	// LinkBase, when set, replaces SenderConfig.LinkBase for this mail (a
	// tenant's own reset page); it must pass vocab.CheckLinkBase.
	LinkBase string
}

// Sent is the outcome of a successful Send.
type Sent struct {
	// MessageID is the Message-ID header written, with angle brackets.
	MessageID string
	// SentAt is when the server accepted the message.
	SentAt time.Time
	// Response is the server's answer to the end of DATA, such as
	// "2.0.0 Ok: queued as …" (it may be empty).
	Response string
}

// ErrInvalidMail marks a Mail that cannot be sent as given (bad recipient
// address, missing key or token). It is permanent.
var ErrInvalidMail = errors.New("resetmail: invalid mail")

// Send sends m once. It dials the server, sends one message and quits, all
// within the context's deadline and SenderConfig.Timeout, whichever is
// sooner. Sending the same m again sends a second message with the same
// Message-ID and link: SMTP cannot deduplicate.
//
// Errors are ErrInvalidMail (permanent) or a *SendError; classify them with
// Permanent and OutcomeUnknown.
func (s *Sender) Send(ctx context.Context, m *Mail) (*Sent, error) {
	return s.traced(ctx, func(ctx context.Context) (*Sent, error) { return s.send(ctx, m) })
}

// Message is one plain-text message of any kind (SendMessage), from
// SenderConfig.From.
type Message struct {
	// To are the recipients, each a bare address or "Name <address>": at
	// least one. They all get the one message.
	To []string
	// Subject is the subject line.
	Subject string
	// Body is the plain text; lines end in CRLF.
	Body string
	// Key is the Message-ID's left part (MessageID): letters, digits and
	// . _ + -. The same key gives the same Message-ID, so receivers can
	// fold resends.
	Key string
}

// SendMessage sends m once, as Send sends a password-reset mail: the same
// server, connection settings, timeouts and error classes (Permanent,
// OutcomeUnknown). Sending the same m again sends a second message with
// the same Message-ID.
func (s *Sender) SendMessage(ctx context.Context, m *Message) (*Sent, error) {
	return s.traced(ctx, func(ctx context.Context) (*Sent, error) {
		if m == nil {
			return nil, fmt.Errorf("%w: no message", ErrInvalidMail)
		}
		if len(m.To) == 0 {
			return nil, fmt.Errorf("%w: no recipient (message %q)", ErrInvalidMail, m.Key)
		}
		to := make([]*netmail.Address, len(m.To))
		for i, a := range m.To {
			var err error
			if to[i], err = netmail.ParseAddress(a); err != nil {
				// The address itself is personal data: keep it out of the error.
				return nil, fmt.Errorf("%w: recipient %d of message %q is not a valid address: %v", ErrInvalidMail, i, m.Key, err)
			}
		}
		return s.deliver(ctx, m.Key, to, m.Subject, m.Body)
	})
}

// traced runs send in a client span (smtp.send) naming the server and, once
// sent, the Message-ID.
func (s *Sender) traced(ctx context.Context, send func(context.Context) (*Sent, error)) (*Sent, error) {
	ctx, span := s.tracer.Start(ctx, "smtp.send", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("server.address", s.host), attribute.Int("server.port", s.port)))
	defer span.End()
	sent, err := send(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "mail not sent")
		return nil, err
	}
	span.SetAttributes(attribute.String("smtp.message_id", sent.MessageID))
	return sent, nil
}

// send is Send without the span.
func (s *Sender) send(ctx context.Context, m *Mail) (*Sent, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: no mail", ErrInvalidMail)
	}
	if !atomRE.MatchString(m.DownstreamKey) {
		return nil, fmt.Errorf("%w: downstream key %q cannot be a Message-ID's left part", ErrInvalidMail, m.DownstreamKey)
	}
	if m.Token == "" {
		return nil, fmt.Errorf("%w: empty token (user %q)", ErrInvalidMail, m.UserID)
	}
	href, err := s.linkFor(m)
	if err != nil {
		return nil, err
	}
	to, err := netmail.ParseAddress(m.To)
	if err != nil {
		// The address itself is personal data: keep it out of the error.
		return nil, fmt.Errorf("%w: recipient of user %q is not a valid address: %v", ErrInvalidMail, m.UserID, err)
	}
	return s.deliver(ctx, m.DownstreamKey, []*netmail.Address{to}, Subject, body(href))
}

// deliver sends one message with Message-ID MessageID(key, domain) to the
// recipients over one SMTP connection, bounded by ctx and the Sender's
// timeout.
func (s *Sender) deliver(ctx context.Context, key string, to []*netmail.Address, subject, text string) (*Sent, error) {
	if !atomRE.MatchString(key) {
		return nil, fmt.Errorf("%w: key %q cannot be a Message-ID's left part", ErrInvalidMail, key)
	}
	messageID := MessageID(key, s.domain)
	rcpts := make([]string, len(to))
	for i, a := range to {
		rcpts[i] = a.Address
	}

	msg := gomail.NewMsg()
	msg.FromMailAddress(s.from)
	msg.ToMailAddress(to...)
	msg.Subject(subject)
	msg.SetMessageIDWithValue(key + "@" + s.domain)
	msg.SetDate()
	msg.SetBodyString(gomail.TypeTextPlain, text)

	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	client, err := gomail.NewClient(s.host, s.clientOptions(ctx)...)
	if err != nil {
		return nil, s.sendError(ctx, messageID, "configuring the SMTP client", rcpts, err)
	}

	conn, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return nil, s.sendError(ctx, messageID, "connecting", rcpts, err)
	}
	err = client.SendWithSMTPClient(conn, msg)
	if !msg.IsDelivered() {
		_ = client.CloseWithSMTPClient(conn)
		if err == nil {
			err = errors.New("message not delivered, for no reason given")
		}
		return nil, s.sendError(ctx, messageID, "sending", rcpts, err)
	}
	// The server took the message: what follows (QUIT) cannot undo that.
	sentAt := time.Now()
	_ = client.CloseWithSMTPClient(conn)
	return &Sent{MessageID: messageID, SentAt: sentAt, Response: msg.ServerResponse()}, nil
}

// clientOptions are go-mail's options for one Send bounded by ctx: its
// port, timeouts, TLS policy and authentication.
func (s *Sender) clientOptions(ctx context.Context) []gomail.Option {
	opts := []gomail.Option{
		gomail.WithPort(s.port),
		gomail.WithTimeout(s.timeout),
		gomail.WithoutNoop(), // the connection is fresh
		gomail.WithoutRset(), // one message per connection
		gomail.WithDialContextFunc(func(dctx context.Context, network, address string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(dctx, network, address)
			if err != nil {
				return nil, err
			}
			// go-mail bounds each command by its own timeout but does
			// not watch ctx after dialing: closing the connection when
			// ctx ends (or Send returns) makes ctx bound the whole
			// exchange.
			context.AfterFunc(ctx, func() { conn.Close() })
			return conn, nil
		}),
	}
	if s.loopback {
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	} else {
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSOpportunistic))
	}
	if s.user != "" || s.pass != "" {
		opts = append(opts,
			gomail.WithOpportunisticSMTPAuth(gomail.SMTPAuthSCRAMSHA256, gomail.SMTPAuthSCRAMSHA1,
				gomail.SMTPAuthCramMD5, gomail.SMTPAuthPlain, gomail.SMTPAuthLogin),
			gomail.WithUsername(s.user), gomail.WithPassword(s.pass))
	}
	return opts
}

// linkFor returns m's reset link, on m.LinkBase when set.
func (s *Sender) linkFor(m *Mail) (string, error) {
	if m.LinkBase == "" {
		return s.Link(m.Token), nil
	}
	if err := vocab.CheckLinkBase(m.LinkBase); err != nil {
		return "", fmt.Errorf("%w: the tenant's reset link base %q %v", ErrInvalidMail, m.LinkBase, err)
	}
	return link(m.LinkBase, m.Token), nil
}

// body is the text of the mail that links to href.
func body(href string) string {
	return "Hello,\r\n" +
		"\r\n" +
		"someone asked to reset the password of your account. To choose a new\r\n" +
		"password, open this link:\r\n" +
		"\r\n" +
		href + "\r\n" +
		"\r\n" +
		"If you did not ask for this, ignore this mail: your password stays as it is.\r\n"
}
