package core

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

// flightStore is a Store for the flight tests: ClaimGetByKey answers from
// reads (blocking on hold first when set), audit rows are recorded, and
// AuditInsertMany fails any batch holding a row whose reason is "bad".
// Everything else is left nil: these tests never reach it.
type flightStore struct {
	Store
	hold  chan struct{}
	reads chan error // one answer per ClaimGetByKey: nil is the live claim

	mu      sync.Mutex
	nReads  int
	batches [][]*AuditInsertParams // every AuditInsertMany call
	rows    []*AuditInsertParams
	// writing, when set, blocks audit writes until it is closed; started
	// receives when a write begins.
	writing, started chan struct{}
}

var liveClaim = &Claim{ID: 1, OperationID: "00000000-0000-4000-8000-000000000001", TenantID: "acme", Tool: "t",
	IdempotencyKey: "flight-key-0001", Status: vocab.StatusQueued, JobID: 9}

func (s *flightStore) ClaimGetByKey(ctx context.Context, p *ClaimGetByKeyParams) (*Claim, error) {
	s.mu.Lock()
	s.nReads++
	s.mu.Unlock()
	if s.hold != nil {
		<-s.hold
	}
	err := <-s.reads
	if err != nil {
		return nil, err
	}
	c := *liveClaim
	c.ArgsHash = p.IdempotencyKey // the tests' intents hash to their key
	return &c, nil
}

func (s *flightStore) AuditInsert(_ context.Context, r *AuditInsertParams) error {
	if r.Reason == "bad" {
		return errors.New("bad row")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, r)
	return nil
}

func (s *flightStore) AuditInsertMany(ctx context.Context, rows []*AuditInsertParams) error {
	if s.started != nil {
		select {
		case s.started <- struct{}{}:
		default:
		}
	}
	if s.writing != nil {
		<-s.writing
	}
	s.mu.Lock()
	s.batches = append(s.batches, rows)
	s.mu.Unlock()
	for _, r := range rows {
		if r.Reason == "bad" {
			return errors.New("a bad row in the batch")
		}
	}
	for _, r := range rows {
		if err := s.AuditInsert(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

func newFlightGate(t *testing.T, s *flightStore) *Gate {
	t.Helper()
	g, err := New(&Config{Store: s, Enqueuer: noJobs{}, Policies: []Policy{{Tool: "t", TTL: time.Hour}}})
	require.NoError(t, err)
	return g
}

type noJobs struct{}

func (noJobs) JobInsert(context.Context, Tx, *Claim) (int64, error) {
	return 0, errors.New("no jobs here")
}

func flightParams(key string) *ClaimParams {
	return &ClaimParams{Actor: vocab.Actor{TenantID: "acme", UserID: "u"},
		Intent: &Intent{Tool: "t", Key: key, Args: map[string]any{"idempotency_key": key}, ArgsHash: key}}
}

// waitFollowers blocks until n calls joined the flight of key.
func waitFollowers(t *testing.T, g *Gate, key string, n int) {
	t.Helper()
	k := flightKey{tenant: "acme", tool: "t", key: key, argsHash: key}
	require.Eventually(t, func() bool {
		g.flights.mu.Lock()
		defer g.flights.mu.Unlock()
		f := g.flights.m[k]
		return f != nil && f.followers == n
	}, time.Minute, time.Millisecond)
}

type answer struct {
	res *ClaimResult
	err error
}

func TestIdenticalCallsShareOneRead(t *testing.T) {
	const n = 16
	s := &flightStore{hold: make(chan struct{}), reads: make(chan error, 1)}
	g := newFlightGate(t, s)
	answers := make(chan answer, n)
	for range n {
		go func() {
			res, err := g.Claim(context.Background(), flightParams("flight-key-0001"))
			answers <- answer{res, err}
		}()
	}
	waitFollowers(t, g, "flight-key-0001", n-1)
	s.reads <- nil
	close(s.hold)
	for range n {
		a := <-answers
		require.NoError(t, a.err)
		require.Equal(t, vocab.OutcomeInFlight, a.res.Outcome)
		require.Equal(t, liveClaim.OperationID, a.res.Claim.OperationID)
	}
	require.Equal(t, 1, s.nReads, "one read for all identical calls")
	require.Len(t, s.rows, n, "an audit row per call")
}

func TestFollowersRunOnTheirOwnWhenTheLeaderFails(t *testing.T) {
	s := &flightStore{hold: make(chan struct{}), reads: make(chan error, 2)}
	g := newFlightGate(t, s)
	leader, follower := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := g.Claim(context.Background(), flightParams("flight-key-0001"))
		leader <- answer{res, err}
	}()
	waitFollowers(t, g, "flight-key-0001", 0)
	go func() {
		res, err := g.Claim(context.Background(), flightParams("flight-key-0001"))
		follower <- answer{res, err}
	}()
	waitFollowers(t, g, "flight-key-0001", 1)
	s.reads <- vocab.ErrUnavailable // the leader's read
	s.reads <- nil                  // the follower's own
	close(s.hold)
	a := <-leader
	require.ErrorIs(t, a.err, vocab.ErrUnavailable)
	b := <-follower
	require.NoError(t, b.err, "a follower does not fail by its leader's error")
	require.Equal(t, vocab.OutcomeInFlight, b.res.Outcome)
	require.Equal(t, 2, s.nReads, "the follower read on its own")
	require.Len(t, s.rows, 1, "the follower's audit row")
}

func TestOneBadAuditRowFailsOnlyItsCall(t *testing.T) {
	s := &flightStore{writing: make(chan struct{}), started: make(chan struct{}, 1)}
	b := newAuditBatcher(s, time.Minute)
	ctx := context.Background()
	errs := make(chan error, 1)
	go func() { errs <- b.write(ctx, &AuditInsertParams{Reason: "first"}) }()
	<-s.started
	// While the first write is held, three rows queue for the next batch.
	rows := []string{"ok-1", "bad", "ok-2"}
	results := make([]chan error, len(rows))
	for i, reason := range rows {
		results[i] = make(chan error, 1)
		go func() { results[i] <- b.write(ctx, &AuditInsertParams{Reason: reason}) }()
	}
	require.Eventually(t, func() bool {
		return b.groups.Queued() == len(rows)
	}, time.Minute, time.Millisecond)
	close(s.writing)
	require.NoError(t, <-errs)
	require.NoError(t, <-results[0])
	require.Error(t, <-results[1])
	require.NoError(t, <-results[2])
	require.Len(t, s.batches, 2, "the three queued rows went in one batch")
	require.Len(t, s.batches[1], 3)
	require.Len(t, s.rows, 3, "the good rows were written on their own after the batch failed")
}
