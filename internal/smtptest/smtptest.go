// Package smtptest serves scripted SMTP servers for what Mailpit cannot do:
// never greet, or take a whole message and never answer it.
package smtptest

import (
	"bufio"
	"net"
	"net/textproto"
	"strings"
	"testing"
)

// Mode is how a scripted server behaves.
type Mode int

const (
	// Silent accepts connections and never says a word.
	Silent Mode = iota
	// Swallow greets, accepts the envelope and the message, and never
	// answers the message: its outcome is unknown to the client.
	Swallow
)

// Start serves mode on a loopback port until the test ends and returns its
// address.
func Start(t testing.TB, mode Mode) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(conn, mode)
		}
	}()
	return ln.Addr().String()
}

func serve(conn net.Conn, mode Mode) {
	defer conn.Close()
	if mode == Silent {
		_, _ = conn.Read(make([]byte, 1)) // until the client hangs up
		return
	}
	tc := textproto.NewConn(conn)
	_ = tc.PrintfLine("220 scripted ESMTP")
	for {
		line, err := tc.ReadLine()
		if err != nil {
			return
		}
		switch strings.ToUpper(strings.Fields(line + " x")[0]) {
		case "EHLO", "HELO":
			_ = tc.PrintfLine("250 scripted")
		case "MAIL", "RCPT":
			_ = tc.PrintfLine("250 ok")
		case "DATA":
			_ = tc.PrintfLine("354 go ahead")
			if _, err := tc.ReadDotBytes(); err != nil {
				return
			}
			// No answer to the message, until the client hangs up.
			_, _ = bufio.NewReader(conn).ReadByte()
			return
		case "QUIT":
			_ = tc.PrintfLine("221 bye")
			return
		default:
			_ = tc.PrintfLine("502 no")
		}
	}
}
