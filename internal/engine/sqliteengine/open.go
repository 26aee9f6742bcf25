package sqliteengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// DriverName is the database/sql driver name modernc.org/sqlite registers.
const DriverName = "sqlite"

// BusyTimeout is how long a statement waits for another connection or
// process holding the write lock before it fails with SQLITE_BUSY, which
// the store reports as vocab.ErrUnavailable.
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
		return time.Time{}, fmt.Errorf("sqliteengine: stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

// textTime scans a stored time into dst.
type textTime struct{ dst *time.Time }

func (t textTime) Scan(src any) error {
	switch v := src.(type) {
	case string:
		return t.parse(v)
	case []byte:
		return t.parse(string(v))
	case time.Time: // a column declared DATE, DATETIME or TIMESTAMP
		*t.dst = v.UTC()
		return nil
	}
	return fmt.Errorf("sqliteengine: stored time is %T, not text", src)
}

func (t textTime) parse(s string) (err error) {
	*t.dst, err = ParseTime(s)
	return err
}

// nullTextTime scans a nullable stored time into dst; NULL is nil.
type nullTextTime struct{ dst **time.Time }

func (t nullTextTime) Scan(src any) error {
	if src == nil {
		*t.dst = nil
		return nil
	}
	var v time.Time
	if err := (textTime{&v}).Scan(src); err != nil {
		return err
	}
	*t.dst = &v
	return nil
}

// nullTime passes a time as stored text, and nil as NULL: for a Now
// override, the database's clock.
func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return FormatTime(*t)
}

// seconds is d as a strftime modifier, such as "+120.000 seconds".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%+.3f seconds", d.Seconds())
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
// gate, the store and River's InsertTx and JobCompleteTx only use the
// transaction they are given.
//
// Other processes on the same file (idemctl next to a running server) wait
// up to BusyTimeout for the write lock.
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("sqliteengine: database path is empty")
	}
	db, err := sql.Open(DriverName, DSN(path))
	if err != nil {
		return nil, fmt.Errorf("sqliteengine: open %s: %w", path, err)
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
		return nil, fmt.Errorf("sqliteengine: open %s: %w", path, translate(err))
	}
	return db, nil
}
