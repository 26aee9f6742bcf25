package pgstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/gate"
)

// NotifyChannel is the channel a trigger notifies, with the claim id as
// payload, when a claim turns terminal.
const NotifyChannel = "idemgate_claim_terminal"

// Listener is a gate.Waiter on one LISTEN connection per process: waiters
// subscribe by claim id and are woken when the trigger on
// idempotency_claims notifies NotifyChannel. While the connection is down,
// and once after every reconnect, every waiter is woken so that it re-reads
// its claim: a notification missed meanwhile costs a read, never a hang.
type Listener struct {
	connConfig *pgx.ConnConfig
	logger     *slog.Logger

	mu        sync.Mutex
	subs      map[int64]map[chan struct{}]struct{}
	connected bool
}

var _ gate.Waiter = (*Listener)(nil)

// PollInterval is how often waiters are woken while there is no LISTEN
// connection, and always by a polling Listener.
const PollInterval = 250 * time.Millisecond

// NewListener returns a Listener that connects with pool's configuration
// (its own connection, outside the pool). Call Run to start it.
func NewListener(pool *pgxpool.Pool, logger *slog.Logger) *Listener {
	return NewListenerConfig(pool.Config().ConnConfig.Copy(), logger)
}

// NewListenerConfig returns a Listener whose LISTEN connection is made
// with connConfig: a connection that keeps its session, never one through
// a transaction pooler (PgBouncer's pool_mode=transaction loses a LISTEN
// with the transaction that ran it, silently). A nil connConfig makes a
// polling Listener: it never connects and wakes every waiter each
// PollInterval to re-read its claim. Call Run to start it.
func NewListenerConfig(connConfig *pgx.ConnConfig, logger *slog.Logger) *Listener {
	if logger == nil {
		logger = slog.Default()
	}
	return &Listener{
		connConfig: connConfig,
		logger:     logger,
		subs:       make(map[int64]map[chan struct{}]struct{}),
	}
}

// Subscribe implements gate.Waiter.
func (l *Listener) Subscribe(claimID int64) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	set := l.subs[claimID]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		l.subs[claimID] = set
	}
	set[ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.subs[claimID], ch)
		if len(l.subs[claimID]) == 0 {
			delete(l.subs, claimID)
		}
	}
}

// Connected reports whether the LISTEN connection is up.
func (l *Listener) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected
}

// Run keeps the LISTEN connection up until ctx ends, reconnecting with a
// capped backoff; a polling Listener wakes its waiters until ctx ends.
func (l *Listener) Run(ctx context.Context) {
	stopPoll := make(chan struct{})
	defer close(stopPoll)
	if l.connConfig == nil {
		l.pollWhileDisconnected(ctx, stopPoll)
		return
	}
	go l.pollWhileDisconnected(ctx, stopPoll)

	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx)
		l.setConnected(false)
		if ctx.Err() != nil {
			return
		}
		l.logger.Warn("pgstore: LISTEN connection lost; reconnecting", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *Listener) listen(ctx context.Context) error {
	connectCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := pgx.ConnectConfig(connectCtx, l.connConfig)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	l.setConnected(true)
	l.wakeAll() // anything that happened while we were away
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var id int64
		for _, c := range n.Payload {
			if c < '0' || c > '9' {
				id = -1
				break
			}
			id = id*10 + int64(c-'0')
		}
		if id > 0 {
			l.wake(id)
		}
	}
}

func (l *Listener) setConnected(v bool) {
	l.mu.Lock()
	l.connected = v
	l.mu.Unlock()
}

func (l *Listener) pollWhileDisconnected(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
			if !l.Connected() {
				l.wakeAll()
			}
		}
	}
}

func (l *Listener) wake(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (l *Listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, set := range l.subs {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}
