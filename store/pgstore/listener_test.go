package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/store/pgstore"
)

// TestPollingListenerWakesWaiters: without a connection configuration (a
// transaction pooler and no IDEMGATE_LISTEN_URL) the Listener never
// connects, and every waiter is woken again and again to re-read its
// claim; after Run returns nobody is woken.
func TestPollingListenerWakesWaiters(t *testing.T) {
	t.Parallel()

	l := pgstore.NewListenerConfig(nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()

	a, unsubA := l.Subscribe(1)
	defer unsubA()
	b, unsubB := l.Subscribe(2)
	for i := range 2 { // woken more than once
		for _, ch := range []<-chan struct{}{a, b} {
			select {
			case <-ch:
			case <-time.After(time.Minute):
				t.Fatalf("round %d: a waiter was not woken", i)
			}
		}
	}
	require.False(t, l.Connected())
	unsubB()

	cancel()
	<-done
	select { // drain a wake that raced with cancel
	case <-a:
	default:
	}
	select {
	case <-a:
		t.Fatal("woken after Run returned")
	case <-time.After(3 * pgstore.PollInterval):
	}
}
