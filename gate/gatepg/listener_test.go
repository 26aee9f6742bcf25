package gatepg_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatepg"
	"github.com/idemgate/idemgate/gate/gatetest"
	"github.com/idemgate/idemgate/internal/pgtest"
)

func TestListenerWakesOnTerminalTransitionOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := pgtest.NewDB(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	store := gatepg.New(pool)
	g, err := gate.New(&gate.Config{Store: store, Enqueuer: riverEnqueuer{client: client}, Policies: gatetest.Policies()})
	require.NoError(t, err)

	l := gatepg.NewListener(pool, nil)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, l.Connected, 60*time.Second, 10*time.Millisecond)

	c := gatetest.Claim(ctx, t, g, nil).Claim
	ch, unsubscribe := l.Subscribe(c.ID)
	defer unsubscribe()

	// Taking the lease is not a terminal transition: no wake-up.
	leased, err := store.ClaimLease(ctx, &gate.ClaimLeaseParams{ID: c.ID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	select {
	case <-ch:
		t.Fatal("woken by a non-terminal transition")
	case <-time.After(300 * time.Millisecond):
	}

	_, err = store.ClaimComplete(ctx, &gate.ClaimCompleteParams{ID: c.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{}`)})
	require.NoError(t, err)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by the terminal transition")
	}
}
