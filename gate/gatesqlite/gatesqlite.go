// Package gatesqlite is the SQLite implementation of gate.Store, on
// database/sql with the pure-Go modernc.org/sqlite driver, sharing its
// *sql.DB with River's riversqlite driver.
//
// Open the database with Open: it sets WAL, a busy timeout, foreign keys,
// BEGIN IMMEDIATE transactions and a single connection, which is what one
// writer per file needs (see Open).
//
// Times are TEXT in RFC 3339 UTC with milliseconds (TimeFormat), so that
// text order is time order; every comparison is made in SQL against
// strftime's 'now', the database's clock, unless a test passes Now.
package gatesqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// DriverName is the database/sql driver name modernc.org/sqlite registers.
const DriverName = "sqlite"

// BusyTimeout is how long a statement waits for another connection or
// process holding the write lock before it fails with SQLITE_BUSY, which
// the store reports as domain.ErrUnavailable.
const BusyTimeout = 10 * time.Second

// TimeFormat is how every timestamp is stored: RFC 3339 in UTC with exactly
// three fractional digits, what strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
// produces. One fixed width makes text order time order.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// FormatTime returns t as stored: UTC, truncated to the millisecond,
// in TimeFormat.
func FormatTime(t time.Time) string {
	return t.UTC().Truncate(time.Millisecond).Format(TimeFormat)
}

// ParseTime parses a stored timestamp; the result is in UTC.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("gatesqlite: stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

// DSN returns the modernc.org/sqlite data source name Open uses for the
// database file at path: WAL journal, synchronous=NORMAL (durable across
// process crashes; a power loss may lose the last transactions but never
// corrupts), foreign keys on, a BusyTimeout wait for the write lock, and
// BEGIN IMMEDIATE for every transaction, so that a transaction takes the
// write lock when it begins and two writers never deadlock upgrading a read
// lock (SQLITE_BUSY_SNAPSHOT, which no busy timeout retries).
func DSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	// A file: URI decodes percent escapes and starts its query at '?'.
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return "file:" + escaped + "?" + q.Encode()
}

// Open opens (creating if needed) the SQLite database file at path with DSN
// and checks that it can be used.
//
// The pool has one connection, as River's riversqlite driver asks: SQLite
// allows one writer per file at a time, and River's many concurrent
// internal operations would otherwise fail with SQLITE_BUSY. Callers queue
// for the connection in Go instead (respecting their contexts). The
// consequence every caller must respect: while a goroutine holds a
// transaction, it must not use the *sql.DB (or a Store on it) until the
// transaction ends, or it waits for itself until its context expires. The
// gate, the stores and River's InsertTx and JobCompleteTx only use the
// transaction they are given.
//
// Other processes on the same file (idemctl next to a running server) wait
// up to BusyTimeout for the write lock.
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("gatesqlite: database path is empty")
	}
	db, err := sql.Open(DriverName, DSN(path))
	if err != nil {
		return nil, fmt.Errorf("gatesqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	// Keep the one connection: reopening runs the pragmas again.
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)

	ctx, cancel := context.WithTimeout(context.Background(), BusyTimeout+5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("gatesqlite: open %s: %w", path, translate(err))
	}
	return db, nil
}

// querier is what a pool and a transaction have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Store is the SQLite gate.Store. It keeps its statements prepared: with
// one connection, every statement runs in series, and compiling one costs
// more than running it. Use one Store per database.
type Store struct {
	executor
	db *sql.DB
}

var _ gate.Store = (*Store)(nil)

// New returns a Store on db, which should come from Open (or at least use
// DSN's settings). It panics if db is nil.
func New(db *sql.DB) *Store {
	if db == nil {
		panic("gatesqlite.New: db is nil")
	}
	stmts := &stmtCache{db: db, m: map[string]*sql.Stmt{}, inFlight: map[string]bool{}}
	return &Store{executor: executor{q: db, stmts: stmts}, db: db}
}

// DB returns the store's database.
func (s *Store) DB() *sql.DB { return s.db }

// Close releases the store's prepared statements; the database stays open.
func (s *Store) Close() error { return s.stmts.close() }

// Begin starts a transaction. SQLite's transactions are serializable; with
// Open's DSN it begins IMMEDIATE, holding the write lock from the start.
func (s *Store) Begin(ctx context.Context) (gate.Tx, error) {
	// Prepare what the transaction may run while the pool's connection is
	// free: inside it, the transaction holds the only one.
	s.stmts.prepareAll(ctx)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, translate(err)
	}
	return &Tx{executor: executor{q: tx, tx: tx, stmts: s.stmts}, tx: tx}, nil
}

// Tx is a SQLite gate.Tx.
type Tx struct {
	executor
	tx *sql.Tx
}

// Commit commits the transaction.
func (t *Tx) Commit(context.Context) error { return translate(t.tx.Commit()) }

// Rollback rolls the transaction back; after Commit it is a no-op.
func (t *Tx) Rollback(context.Context) error {
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return translate(err)
}

// Raw returns the *sql.Tx, for River's InsertTx and JobCompleteTx.
func (t *Tx) Raw() any { return t.tx }

type executor struct {
	q querier
	// tx is the transaction q is, or nil on the pool.
	tx    *sql.Tx
	stmts *stmtCache
}

// stmt returns query prepared, or nil to run it unprepared. On the pool it
// prepares query if needed; in a transaction it uses the store's prepared
// statement (prepared before Begin) on the transaction's connection.
func (e executor) stmt(ctx context.Context, query string) *sql.Stmt {
	if e.tx == nil {
		return e.stmts.prepare(ctx, query)
	}
	if st := e.stmts.lookup(query); st != nil {
		return e.tx.StmtContext(ctx, st)
	}
	return nil
}

func (e executor) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := e.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return e.q.QueryRowContext(ctx, query, args...)
}

func (e executor) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := e.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return e.q.QueryContext(ctx, query, args...)
}

func (e executor) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := e.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return e.q.ExecContext(ctx, query, args...)
}

// Claim is an alias so that the queries read naturally.
type Claim = gate.Claim

func (e executor) claimRow(ctx context.Context, query string, args ...any) (*Claim, error) {
	c, err := scanClaim(e.queryRow(ctx, query, args...))
	return c, translate(err)
}

func (e executor) ClaimInsert(ctx context.Context, p *gate.ClaimInsertParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimInsert, p.OperationID, p.TenantID, p.Tool, p.IdempotencyKey, p.UserID,
		string(p.Args), p.ArgsHash, int64(p.TTL/time.Second), int64(p.Retention/time.Second))
	if errors.Is(err, domain.ErrNotFound) {
		return nil, domain.ErrAlreadyExists
	}
	return c, err
}

func (e executor) ClaimGetByKey(ctx context.Context, p *gate.ClaimGetByKeyParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByKey, p.TenantID, p.Tool, p.IdempotencyKey, clock(p.Now))
}

func (e executor) ClaimGetByID(ctx context.Context, p *gate.ClaimGetByIDParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByID, p.ID, clock(p.Now))
}

func (e executor) ClaimTakeOver(ctx context.Context, p *gate.ClaimTakeOverParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimTakeOver, p.ID, p.OperationID, p.UserID, string(p.Args), p.ArgsHash,
		int64(p.TTL/time.Second), clock(p.Now), int64(p.Retention/time.Second))
	if errors.Is(err, domain.ErrNotFound) {
		return nil, domain.ErrStateChanged
	}
	return c, err
}

func (e executor) ClaimSetJob(ctx context.Context, p *gate.ClaimSetJobParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimSetJob, p.ID, p.JobID)
}

func (e executor) ClaimLease(ctx context.Context, p *gate.ClaimLeaseParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimLease, p.ID, p.JobID, seconds(p.Lease), clock(p.Now))
	if !errors.Is(err, domain.ErrNotFound) {
		return c, err
	}
	c, err = e.ClaimGetByID(ctx, &gate.ClaimGetByIDParams{ID: p.ID, Now: p.Now})
	if err != nil {
		return nil, err
	}
	return c, domain.ErrLeaseUnavailable
}

func (e executor) ClaimComplete(ctx context.Context, p *gate.ClaimCompleteParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimComplete, p.ID, p.Epoch, nullJSON(p.Result), clock(p.Now))
	return c, leaseLost(err)
}

func (e executor) ClaimFail(ctx context.Context, p *gate.ClaimFailParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	c, err := e.claimRow(ctx, sqlClaimFail, p.ID, p.Epoch, string(errJSON), p.LeaseExpiredOnly, clock(p.Now))
	return c, leaseLost(err)
}

func (e executor) ClaimRelease(ctx context.Context, p *gate.ClaimReleaseParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.LastError)
	if err != nil {
		return nil, err
	}
	c, err := e.claimRow(ctx, sqlClaimRelease, p.ID, p.Epoch, string(errJSON))
	return c, leaseLost(err)
}

func (e executor) ClaimReclaim(ctx context.Context, p *gate.ClaimReclaimParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimReclaim, p.ID, p.Epoch, p.JobID, clock(p.Now))
	return c, leaseLost(err)
}

func (e executor) ClaimRedrive(ctx context.Context, p *gate.ClaimRedriveParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimRedrive, p.ID, p.NextGeneration, p.JobID)
	if errors.Is(err, domain.ErrNotFound) {
		return nil, domain.ErrStateChanged
	}
	return c, err
}

func (e executor) ClaimAbandon(ctx context.Context, p *gate.ClaimAbandonParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	c, err := e.claimRow(ctx, sqlClaimAbandon, p.ID, p.Epoch, p.JobID, string(errJSON), clock(p.Now))
	if errors.Is(err, domain.ErrNotFound) {
		return nil, domain.ErrStateChanged
	}
	return c, err
}

func (e executor) ClaimListOrphaned(ctx context.Context, p *gate.ClaimListOrphanedParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListOrphaned, p.Limit, clock(p.Now))
}

func (e executor) ClaimListStalled(ctx context.Context, p *gate.ClaimListStalledParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListStalled, p.Limit, clock(p.Now), p.StaleAfter.Seconds())
}

func (e executor) ClaimRepoint(ctx context.Context, p *gate.ClaimRepointParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimRepoint, p.ID, p.Epoch, p.OldJobID, p.NewJobID)
	if errors.Is(err, domain.ErrNotFound) {
		return nil, domain.ErrStateChanged
	}
	return c, err
}

func (e executor) ClaimList(ctx context.Context, p *gate.ClaimListParams) ([]*Claim, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	return e.claimRows(ctx, sqlClaimList, p.TenantID, p.Tool, string(p.Status), clock(p.Since), limit)
}

func (e executor) ClaimGetByOperation(ctx context.Context, p *gate.ClaimGetByOperationParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByOperation, p.TenantID, p.OperationID)
}

func (e executor) ClaimListNewest(ctx context.Context, p *gate.ClaimListNewestParams) ([]*Claim, error) {
	var (
		after   any
		afterID int64
	)
	if p.After != nil {
		after, afterID = FormatTime(p.After.CreatedAt), p.After.ID
	}
	return e.claimRows(ctx, sqlClaimListNewest, p.TenantID, p.Tool, string(p.Status), after, afterID, max(p.Limit, 1))
}

// JobGet implements gate.Executor. Lock needs nothing more on SQLite: a
// transaction begins IMMEDIATE, holding the database's one write lock, so
// no worker fetches the job before it ends.
func (e executor) JobGet(ctx context.Context, p *gate.JobGetParams) (*gate.Job, error) {
	var (
		j    gate.Job
		next sql.NullString
	)
	if err := e.queryRow(ctx, sqlJobGet, p.ID).Scan(&j.ID, &j.State, &next); err != nil {
		return nil, translate(err)
	}
	if next.Valid {
		t, err := ParseTime(next.String)
		if err != nil {
			return nil, err
		}
		j.NextRunAt = &t
	}
	return &j, nil
}

func (e executor) ClaimListLeaseExpired(ctx context.Context, p *gate.ClaimListLeaseExpiredParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListLeaseExpired, p.Limit, clock(p.Now))
}

// claimRows reads every row before returning, so that the (only)
// connection is free again when it returns.
func (e executor) claimRows(ctx context.Context, query string, args ...any) ([]*Claim, error) {
	rows, err := e.query(ctx, query, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*Claim
	for rows.Next() {
		c, err := scanClaim(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, c)
	}
	return out, translate(rows.Err())
}

func (e executor) ClaimArchiveExpired(ctx context.Context, p *gate.ClaimArchiveExpiredParams) (int, error) {
	if _, err := e.exec(ctx, sqlClaimArchiveTombstones, p.Limit, clock(p.Now)); err != nil {
		return 0, translate(err)
	}
	res, err := e.exec(ctx, sqlClaimArchiveDelete, p.Limit, clock(p.Now))
	if err != nil {
		return 0, translate(err)
	}
	n, err := res.RowsAffected()
	return int(n), translate(err)
}

func (e executor) TombstoneGetByKey(ctx context.Context, p *gate.TombstoneGetByKeyParams) (*gate.Tombstone, error) {
	var (
		t                  gate.Tombstone
		expired, retainTil string
	)
	err := e.queryRow(ctx, sqlTombstoneGetByKey, p.TenantID, p.Tool, p.IdempotencyKey, clock(p.Now)).Scan(&t.TenantID, &t.Tool,
		&t.IdempotencyKey, &t.ArgsHash, &t.OperationID, &t.Status, &t.ErrorCode, &expired, &retainTil)
	if err != nil {
		return nil, translate(err)
	}
	if t.ExpiredAt, err = ParseTime(expired); err != nil {
		return nil, err
	}
	if t.RetainUntil, err = ParseTime(retainTil); err != nil {
		return nil, err
	}
	return &t, nil
}

func (e executor) TombstoneDeleteExpired(ctx context.Context, p *gate.TombstoneDeleteExpiredParams) (int, error) {
	res, err := e.exec(ctx, sqlTombstoneDeleteExpired, p.Limit, clock(p.Now))
	if err != nil {
		return 0, translate(err)
	}
	n, err := res.RowsAffected()
	return int(n), translate(err)
}

func (e executor) AuditInsert(ctx context.Context, p *gate.AuditInsertParams) error {
	var opID, jobID any
	if p.OperationID != "" {
		opID = p.OperationID
	}
	if p.JobID != 0 {
		jobID = p.JobID
	}
	_, err := e.exec(ctx, sqlAuditInsert, p.TenantID, p.UserID, p.TokenID, p.RequestID, p.Tool,
		p.IdempotencyKey, opID, jobID, string(p.Decision), p.Reason, p.ArgsHash, nullJSON(p.Args),
		nullJSON(p.Result), float64(p.Duration)/float64(time.Millisecond), p.ClientRequestID)
	return translate(err)
}

func (e executor) AuditListByKey(ctx context.Context, p *gate.AuditListByKeyParams) ([]*gate.AuditEvent, error) {
	rows, err := e.query(ctx, sqlAuditListByKey, p.TenantID, p.Tool, p.IdempotencyKey)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*gate.AuditEvent
	for rows.Next() {
		var (
			ev         gate.AuditEvent
			createdAt  string
			decision   string
			args, res  []byte
			durationMS float64
		)
		if err := rows.Scan(&ev.ID, &createdAt, &ev.TenantID, &ev.UserID, &ev.TokenID, &ev.RequestID, &ev.ClientRequestID, &ev.Tool,
			&ev.IdempotencyKey, &ev.OperationID, &ev.JobID, &decision, &ev.Reason, &ev.ArgsHash, &args, &res,
			&durationMS); err != nil {
			return nil, translate(err)
		}
		if ev.CreatedAt, err = ParseTime(createdAt); err != nil {
			return nil, err
		}
		ev.Decision = domain.Decision(decision)
		ev.Args, ev.Result = args, res
		ev.Duration = time.Duration(durationMS * float64(time.Millisecond))
		out = append(out, &ev)
	}
	return out, translate(rows.Err())
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

func scanClaim(row scanner) (*Claim, error) {
	var (
		c                                        Claim
		status                                   string
		ttlSeconds                               int64
		args, result, errJSON, lastErr           []byte
		leaseExpiresAt, firstCalledAt, expiresAt sql.NullString
		createdAt, updatedAt                     string
	)
	if err := row.Scan(&c.ID, &c.OperationID, &c.TenantID, &c.Tool, &c.IdempotencyKey, &c.UserID, &args,
		&c.ArgsHash, &status, &c.Epoch, &leaseExpiresAt, &c.Attempts, &c.JobID, &c.Generation, &c.DownstreamKey,
		&ttlSeconds, &result, &errJSON, &lastErr, &firstCalledAt, &createdAt, &updatedAt, &expiresAt,
		&c.Expired, &c.LeaseLive); err != nil {
		return nil, err
	}
	c.Args = args
	c.Status = domain.Status(status)
	c.TTL = time.Duration(ttlSeconds) * time.Second
	if len(result) > 0 {
		c.Result = result
	}
	var err error
	if c.Error, err = decodeErrorInfo(errJSON); err != nil {
		return nil, err
	}
	if c.LastError, err = decodeErrorInfo(lastErr); err != nil {
		return nil, err
	}
	if c.CreatedAt, err = ParseTime(createdAt); err != nil {
		return nil, err
	}
	if c.UpdatedAt, err = ParseTime(updatedAt); err != nil {
		return nil, err
	}
	if c.LeaseExpiresAt, err = ParseNullTime(leaseExpiresAt); err != nil {
		return nil, err
	}
	if c.FirstCalledAt, err = ParseNullTime(firstCalledAt); err != nil {
		return nil, err
	}
	if c.ExpiresAt, err = ParseNullTime(expiresAt); err != nil {
		return nil, err
	}
	return &c, nil
}

// ParseNullTime parses a nullable stored timestamp; NULL is nil.
func ParseNullTime(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := ParseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func decodeErrorInfo(b []byte) (*domain.ErrorInfo, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var info domain.ErrorInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("gatesqlite: stored error: %w", err)
	}
	return &info, nil
}

// clock passes a Now override as stored text, or NULL for the database's
// clock.
func clock(now *time.Time) any {
	if now == nil {
		return nil
	}
	return FormatTime(*now)
}

// seconds is d as a strftime modifier, such as "+120.000 seconds".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%+.3f seconds", d.Seconds())
}

// nullJSON passes an empty document as SQL NULL, and any other as TEXT.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// leaseLost maps "no row matched the fenced update" to domain.ErrLeaseLost.
func leaseLost(err error) error {
	if errors.Is(err, domain.ErrNotFound) {
		return domain.ErrLeaseLost
	}
	return err
}

// translate maps database/sql and SQLite errors to the gate's sentinel
// errors at the boundary.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return domain.ErrNotFound
	}
	if Unavailable(err) {
		return fmt.Errorf("%w: %w", domain.ErrUnavailable, err)
	}
	return err
}

// Unavailable reports whether err means the database cannot be used right
// now (a retryable condition: the write lock stayed busy past BusyTimeout,
// the file cannot be opened, the disk failed or is full, the deadline
// passed), as opposed to a statement error.
func Unavailable(err error) bool {
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		switch sqliteErr.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_FULL, sqlite3.SQLITE_PROTOCOL:
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, driver.ErrBadConn)
}
