package api

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStateSigner: a state verifies under its key until it expires; an
// expired, altered or foreign one is refused.
func TestStateSigner(t *testing.T) {
	now := time.Now()
	s := newStateSigner([]byte("a deployment secret of 32 bytes or more!"))
	st := &requestState{Version: 1, Kind: stateDuplicate, Tenant: "acme", User: "bot", Tool: "refund_order",
		Key: "k-00000001", ArgsHash: "ab", Operation: "op", Expires: now.Add(stateTTL).Unix()}
	wire := s.sign(st)
	got, err := s.verify(wire, now)
	require.NoError(t, err)
	require.Equal(t, st, got)

	_, err = s.verify(wire, now.Add(stateTTL+time.Second))
	require.ErrorContains(t, err, "expired")
	payload, mac, _ := strings.Cut(wire, ".")
	_, err = s.verify(payload+"x."+mac, now)
	require.ErrorContains(t, err, "fails verification")
	other := newStateSigner([]byte("another deployment's secret, 32 bytes+"))
	_, err = other.verify(wire, now)
	require.ErrorContains(t, err, "fails verification")
	// Without a secret, a random key: two processes do not share states.
	a, b := newStateSigner(nil), newStateSigner(nil)
	_, err = b.verify(a.sign(st), now)
	require.ErrorContains(t, err, "fails verification")
}
