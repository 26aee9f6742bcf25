package idemgate

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The worker's metrics listener times out every phase (the red-team found
// none set): a client that sends half a request header is cut off.
func TestMetricsServerCutsSlowClients(t *testing.T) {
	t.Parallel()
	srv := metricsServer(http.NotFoundHandler())
	require.NotZero(t, srv.ReadHeaderTimeout)
	require.NotZero(t, srv.ReadTimeout)
	require.NotZero(t, srv.WriteTimeout)
	require.NotZero(t, srv.IdleTimeout)
	srv.ReadHeaderTimeout = 200 * time.Millisecond // the behaviour, quickly
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")) // never finished
	require.NoError(t, err)
	// The server closes the connection; the deadline only bounds a broken
	// test, it is not the property checked.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	_, err = bufio.NewReader(conn).ReadString('\n')
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept a half-sent request open")
	}
}
