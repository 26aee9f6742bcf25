package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// loadResult is what a closed loop did.
type loadResult struct {
	N        int
	Errors   int
	FirstErr error
	Lat      []time.Duration
	Start    time.Time
	Elapsed  time.Duration
	// PerSecond counts the calls that ended in each second of the window.
	PerSecond []int
}

// rateBetween is the rate of calls that ended between from and to seconds
// into the window.
func (r *loadResult) rateBetween(from, to int) float64 {
	to = min(to, len(r.PerSecond))
	if to <= from {
		return 0
	}
	n := 0
	for _, v := range r.PerSecond[from:to] {
		n += v
	}
	return float64(n) / float64(to-from)
}

func (r *loadResult) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.N) / r.Elapsed.Seconds()
}

// maxErrors aborts a loop that fails this often: a broken run says so
// instead of reporting the speed of failures.
const maxErrors = 50

// closedLoop runs c goroutines that each call op back to back until d has
// passed, and records every successful call's latency. op gets the
// goroutine's index and its call counter.
func closedLoop(ctx context.Context, c int, d time.Duration, op func(ctx context.Context, w, i int) error) *loadResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		res      = &loadResult{}
		errCount atomic.Int64
		lats     = make([][]time.Duration, c)
		perSec   = make([]atomic.Int64, int(d/time.Second)+2)
	)
	res.Start = time.Now()
	deadline := res.Start.Add(d)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			for i := 0; ctx.Err() == nil; i++ {
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				err := op(ctx, w, i)
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					mu.Lock()
					if res.FirstErr == nil {
						res.FirstErr = err
					}
					mu.Unlock()
					if errCount.Add(1) >= maxErrors {
						cancel()
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				if sec := int(time.Since(res.Start) / time.Second); sec < len(perSec) {
					perSec[sec].Add(1)
				}
			}
			lats[w] = lat
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(res.Start)
	for _, l := range lats {
		res.Lat = append(res.Lat, l...)
	}
	res.N = len(res.Lat)
	for i := range int(d / time.Second) {
		res.PerSecond = append(res.PerSecond, int(perSec[i].Load()))
	}
	res.Errors = int(errCount.Load())
	return res
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// lat, sorting it in place.
func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	if !slices.IsSorted(lat) {
		slices.Sort(lat)
	}
	rank := int(float64(len(lat))*p/100+0.999999) - 1
	rank = max(0, min(rank, len(lat)-1))
	return lat[rank]
}

// Effect tables: where an operation's effect lands, one row each, with a
// bigint identity id.
const (
	ledgerTable = "ledger_entries" // apply_credit and bare River's ledger job
	refundTable = "refunds"        // refund_order and bare River's refund job
)

// waitLedger waits until ledger_entries holds want rows; see waitRows.
func waitLedger(ctx context.Context, pool *pgxpool.Pool, want int, timeout time.Duration) (time.Time, int, error) {
	return waitRows(ctx, pool, ledgerTable, want, timeout)
}

// waitRows waits until table (ledgerTable or refundTable) holds want rows
// and returns when it saw them. It polls max(id) (an index probe, cheap
// beside the load) and confirms with count(*) once the ids are all handed
// out.
func waitRows(ctx context.Context, pool *pgxpool.Pool, table string, want int, timeout time.Duration) (time.Time, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	ident := pgx.Identifier{table}.Sanitize()
	last := 0
	for {
		var maxID int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM `+ident).Scan(&maxID); err != nil {
			return time.Time{}, last, err
		}
		if maxID >= int64(want) {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+ident).Scan(&n); err != nil {
				return time.Time{}, last, err
			}
			last = n
			if n >= want {
				return time.Now(), n, nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return time.Time{}, last, fmt.Errorf("only %d of %d operations had their %s row after %s", last, want, table, timeout)
			}
			return time.Time{}, last, ctx.Err()
		case <-tick.C:
		}
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
}
