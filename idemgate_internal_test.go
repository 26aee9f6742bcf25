package idemgate

import (
	"bufio"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/telemetry"
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

// Without OTEL_* variables a Service traces nothing (a no-op provider, no
// exporter); an Options.TracerProvider is used as given.
func TestTracesAreOffWithoutOTELVariables(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	s := &Service{logger: slog.New(slog.DiscardHandler)}
	tp, stop, err := s.traces(t.Context(), telemetry.ServiceAPI)
	require.NoError(t, err)
	stop()
	require.False(t, telemetry.On(tp))

	mine := sdktrace.NewTracerProvider()
	s.opts.TracerProvider = mine
	tp, stop, err = s.traces(t.Context(), telemetry.ServiceAPI)
	require.NoError(t, err)
	stop()
	require.Equal(t, trace.TracerProvider(mine), tp)
}
