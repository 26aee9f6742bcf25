package groups

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQueueFormsTheNextGroupFromWhatQueued: a lone request runs at once,
// alone; what queues while it runs forms the next groups, at most Max
// each; the runner ends when nothing is queued.
func TestQueueFormsTheNextGroupFromWhatQueued(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	var wg sync.WaitGroup
	q := &Queue[int]{Max: 3, Runners: 1}
	q.Do = func(group []int) {
		mu.Lock()
		sizes = append(sizes, len(group))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-hold
		}
		for range group {
			wg.Done()
		}
	}
	wg.Add(1)
	q.Add(0)
	require.Eventually(t, func() bool { return q.Queued() == 0 }, time.Minute, time.Millisecond, "a lone request is taken at once")
	for i := range 5 {
		wg.Add(1)
		q.Add(i + 1)
	}
	require.Equal(t, 5, q.Queued())
	close(hold)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 3, 2}, sizes)
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.running == 0
	}, time.Minute, time.Millisecond, "the runner ends when nothing is queued")
}

// TestQueueSharesABurstOverItsRunners: with Share, a runner takes its
// share of what queued, so that the runners split a burst.
func TestQueueSharesABurstOverItsRunners(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	started := make(chan struct{}, 2)
	var mu sync.Mutex
	var sizes []int
	var wg sync.WaitGroup
	q := &Queue[int]{Max: 32, Runners: 2, Share: true}
	q.Do = func(group []int) {
		mu.Lock()
		sizes = append(sizes, len(group))
		first := len(sizes) <= 2
		mu.Unlock()
		if first {
			started <- struct{}{}
			<-hold
		}
		for range group {
			wg.Done()
		}
	}
	for i := range 2 { // one group of one per runner, both held
		wg.Add(1)
		q.Add(i)
		<-started
	}
	for i := range 9 {
		wg.Add(1)
		q.Add(10 + i)
	}
	close(hold)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 1}, sizes[:2])
	require.Equal(t, 9, sizes[2]+sizes[3]+sum(sizes[4:]))
	require.LessOrEqual(t, sizes[2], 5, "the first runner free takes its share of 9: 5")
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
