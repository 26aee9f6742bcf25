package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/vocab"
)

// groupStore is a Store for the group commit tests. Reads outside a
// transaction find no claim; in a transaction, the keys in taken have a
// claim of other arguments (a race the read did not see). A key "bad"
// fails every write that holds it. Begin blocks on hold while it is open.
type groupStore struct {
	Store
	hold  chan struct{}
	taken map[string]bool

	mu       sync.Mutex
	begins   int
	commits  int
	many     [][]string // the keys of every ClaimInsertMany
	singles  []string   // the keys of every ClaimInsert
	audits   int
	nextID   int64
	inserted map[string]*Claim
}

func (s *groupStore) ClaimGetByKey(context.Context, *ClaimGetByKeyParams) (*Claim, error) {
	return nil, vocab.ErrNotFound
}

// TombstoneGetByKey finds no history: no key ran before.
func (s *groupStore) TombstoneGetByKey(context.Context, *TombstoneGetByKeyParams) (*Tombstone, error) {
	return nil, vocab.ErrNotFound
}

func (s *groupStore) Begin(context.Context) (Tx, error) {
	if s.hold != nil {
		<-s.hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begins++
	return &groupTx{s: s}, nil
}

func (s *groupStore) AuditInsertMany(_ context.Context, rows []*AuditInsertParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audits += len(rows)
	return nil
}

// groupTx is a transaction of groupStore: its claims are kept on commit.
type groupTx struct {
	Store
	s       *groupStore
	pending []*Claim
}

func (tx *groupTx) insert(p *ClaimInsertParams) (*Claim, error) {
	switch {
	case p.IdempotencyKey == "bad":
		return nil, errors.New("a bad row")
	case tx.s.taken[p.IdempotencyKey] || slices.ContainsFunc(tx.pending, func(c *Claim) bool { return c.IdempotencyKey == p.IdempotencyKey }):
		return nil, nil
	}
	tx.s.mu.Lock()
	tx.s.nextID++
	c := &Claim{ID: tx.s.nextID, OperationID: p.OperationID, TenantID: p.TenantID, Tool: p.Tool, IdempotencyKey: p.IdempotencyKey,
		ArgsHash: p.ArgsHash, Status: vocab.StatusQueued, JobID: p.JobID}
	tx.s.mu.Unlock()
	tx.pending = append(tx.pending, c)
	return c, nil
}

func (tx *groupTx) ClaimInsertMany(_ context.Context, rows []*ClaimInsertParams) ([]*Claim, error) {
	keys := make([]string, len(rows))
	out := make([]*Claim, len(rows))
	for i, r := range rows {
		keys[i] = r.IdempotencyKey
	}
	tx.s.mu.Lock()
	tx.s.many = append(tx.s.many, keys)
	tx.s.mu.Unlock()
	for i, r := range rows {
		c, err := tx.insert(r)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

func (tx *groupTx) ClaimInsert(_ context.Context, p *ClaimInsertParams) (*Claim, error) {
	tx.s.mu.Lock()
	tx.s.singles = append(tx.s.singles, p.IdempotencyKey)
	tx.s.mu.Unlock()
	c, err := tx.insert(p)
	if err == nil && c == nil {
		err = vocab.ErrAlreadyExists
	}
	return c, err
}

func (tx *groupTx) ClaimGetByKey(_ context.Context, p *ClaimGetByKeyParams) (*Claim, error) {
	if !tx.s.taken[p.IdempotencyKey] {
		return nil, vocab.ErrNotFound
	}
	return &Claim{ID: 999, OperationID: "00000000-0000-4000-8000-000000000999", TenantID: p.TenantID, Tool: p.Tool,
		IdempotencyKey: p.IdempotencyKey, ArgsHash: "other", Status: vocab.StatusQueued, JobID: 99,
		Args: []byte(`{"n":"other"}`)}, nil
}

func (tx *groupTx) Commit(context.Context) error {
	tx.s.mu.Lock()
	defer tx.s.mu.Unlock()
	tx.s.commits++
	if tx.s.inserted == nil {
		tx.s.inserted = map[string]*Claim{}
	}
	for _, c := range tx.pending {
		tx.s.inserted[c.IdempotencyKey] = c
	}
	return nil
}

func (tx *groupTx) Rollback(context.Context) error { return nil }

// groupJobs is a BatchEnqueuer that numbers jobs and records deletions.
type groupJobs struct {
	mu      sync.Mutex
	next    int64
	deleted []int64
	// parents are the span contexts the group inserts ran under.
	parents []trace.SpanContext
}

func (j *groupJobs) JobInsert(context.Context, Tx, *Claim) (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.next++
	return j.next, nil
}

func (j *groupJobs) JobInsertMany(ctx context.Context, tx Tx, claims []*Claim) ([]int64, error) {
	j.mu.Lock()
	j.parents = append(j.parents, trace.SpanContextFromContext(ctx))
	j.mu.Unlock()
	ids := make([]int64, len(claims))
	for i := range claims {
		ids[i], _ = j.JobInsert(ctx, tx, claims[i])
	}
	return ids, nil
}

func (j *groupJobs) JobDeleteMany(_ context.Context, _ Tx, ids []int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.deleted = append(j.deleted, ids...)
	return nil
}

// groupGate returns a gate on s that tells formed the size of every group.
func groupGate(t *testing.T, s *groupStore, jobs *groupJobs, formed func(int)) *Gate {
	t.Helper()
	g, err := New(&Config{Store: s, Enqueuer: jobs, Policies: []Policy{{Tool: "t", TTL: time.Hour}}, DBTimeout: time.Minute})
	require.NoError(t, err)
	require.NotNil(t, g.batch, "a BatchEnqueuer turns group commit on")
	g.batch.groups.Formed = formed
	return g
}

// groupParams are the parameters of a call of tool t with key and
// arguments hashed to args.
func groupParams(key, args string) *ClaimParams {
	return &ClaimParams{Actor: vocab.Actor{TenantID: "acme", UserID: "u"},
		Intent: &Intent{Tool: "t", Key: key, Args: map[string]any{"idempotency_key": key, "n": args}, ArgsHash: args}}
}

// runGroups starts the first claimGroups calls (each forms a group of one,
// held in Begin), queues the rest behind them, releases the store and
// returns every call's answer, by key.
func runGroups(t *testing.T, s *groupStore, g *Gate, formedSizes chan int, keys []string) map[string]answer {
	t.Helper()
	answers := make(chan struct {
		key string
		answer
	}, len(keys))
	call := func(key string) {
		res, err := g.Claim(context.Background(), groupParams(key, "args-"+key))
		answers <- struct {
			key string
			answer
		}{key, answer{res, err}}
	}
	for _, key := range keys[:claimGroups] {
		go call(key)
		require.Equal(t, 1, <-formedSizes, "a call with nobody before it forms a group at once")
	}
	for _, key := range keys[claimGroups:] {
		go call(key)
	}
	rest := len(keys) - claimGroups
	require.Eventually(t, func() bool { // every other call waits for the next group
		return g.batch.groups.Queued() == rest
	}, time.Minute, time.Millisecond)
	close(s.hold)
	out := map[string]answer{}
	for range keys {
		a := <-answers
		out[a.key] = a.answer
	}
	return out
}

func TestConcurrentNewClaimsShareOneTransaction(t *testing.T) {
	s := &groupStore{hold: make(chan struct{})}
	jobs := &groupJobs{}
	formed := make(chan int, 64)
	g := groupGate(t, s, jobs, func(n int) { formed <- n })
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("group-key-%04d", i)
	}
	answers := runGroups(t, s, g, formed, keys)
	for _, key := range keys {
		a := answers[key]
		require.NoError(t, a.err, key)
		require.Equal(t, vocab.OutcomeAccepted, a.res.Outcome, key)
		require.Equal(t, key, a.res.Claim.IdempotencyKey)
		require.Equal(t, s.inserted[key].OperationID, a.res.Claim.OperationID, "the claim committed for this call")
	}
	require.Equal(t, 16-claimGroups, <-formed, "the queued calls form one group")
	require.Len(t, s.many, claimGroups+1)
	require.Equal(t, claimGroups+1, s.begins, "one transaction per group")
	require.Equal(t, claimGroups+1, s.commits, "one commit per group")
	require.Empty(t, s.singles, "no call claimed on its own")
	require.Empty(t, jobs.deleted)
	last := s.many[len(s.many)-1]
	require.True(t, slices.IsSorted(last), "a group writes its keys in one order: %v", last)
}

func TestAFailedGroupFailsNoOtherCall(t *testing.T) {
	s := &groupStore{hold: make(chan struct{})}
	formed := make(chan int, 64)
	g := groupGate(t, s, &groupJobs{}, func(n int) { formed <- n })
	keys := []string{"first-0001", "first-0002", "good-0001", "bad", "good-0002", "good-0003"}
	answers := runGroups(t, s, g, formed, keys)
	for _, key := range keys {
		a := answers[key]
		if key == "bad" {
			require.Error(t, a.err, "the bad row fails its own call")
			continue
		}
		require.NoError(t, a.err, "%s does not fail by another call's row", key)
		require.Equal(t, vocab.OutcomeAccepted, a.res.Outcome, key)
	}
	require.ElementsMatch(t, []string{"bad", "good-0001", "good-0002", "good-0003"}, s.singles,
		"the failed group's calls claimed on their own")
	require.Equal(t, claimGroups+3, s.commits, "the groups of one and each good call of the failed group committed")
}

func TestACallWhoseKeyWasTakenInTheGroupGetsItsOwnAnswer(t *testing.T) {
	s := &groupStore{hold: make(chan struct{}), taken: map[string]bool{"taken-0001": true}}
	jobs := &groupJobs{}
	formed := make(chan int, 64)
	g := groupGate(t, s, jobs, func(n int) { formed <- n })
	keys := []string{"first-0001", "first-0002", "free-0001", "taken-0001", "free-0002"}
	answers := runGroups(t, s, g, formed, keys)
	require.Equal(t, vocab.OutcomeConflict, answers["taken-0001"].res.Outcome, "answered from the claim that holds the key")
	require.NoError(t, answers["taken-0001"].err)
	for _, key := range []string{"first-0001", "first-0002", "free-0001", "free-0002"} {
		require.Equal(t, vocab.OutcomeAccepted, answers[key].res.Outcome, key)
	}
	require.Len(t, jobs.deleted, 1, "the job of the row not written is deleted in the group's transaction")
	require.Equal(t, []string{"taken-0001"}, s.singles, "only the call that lost claims on its own")
	require.Equal(t, 1, s.audits, "its answer's audit row")
}

func TestACallInASampledTraceClaimsOnItsOwn(t *testing.T) {
	s := &groupStore{}
	formed := make(chan int, 1)
	jobs := &groupJobs{}
	g := groupGate(t, s, jobs, func(n int) { formed <- n })
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	res, err := g.Claim(ctx, groupParams("traced-0001", "a"))
	require.NoError(t, err)
	require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
	require.Equal(t, []string{"traced-0001"}, s.singles, "its trace shows its own job insert")
	require.Empty(t, s.many)
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}})
	res, err = g.Claim(trace.ContextWithSpanContext(context.Background(), unsampled), groupParams("untraced-0001", "a"))
	require.NoError(t, err)
	require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
	require.Equal(t, [][]string{{"untraced-0001"}}, s.many, "a call in a trace not sampled joins a group")
	require.Equal(t, []trace.SpanContext{unsampled}, jobs.parents, "the group's insert runs under that (unsampled) trace, not a new root")
}
