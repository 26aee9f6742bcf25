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

// BorrowDriver returns the Driver on db, a handle of the caller's, after
// CheckDB; its Close closes the store's statements and leaves db open.
func BorrowDriver(ctx context.Context, db *sql.DB) (*Driver, error) {
	if err := CheckDB(ctx, db); err != nil {
		return nil, err
	}
	d := NewDriver(db)
	d.borrowed = true
	return d, nil
}

// CheckDB refuses a handle that idemgate cannot work on: more than one
// open connection (River's riversqlite driver and the queueing described
// at Open need exactly one), no busy timeout (a statement meeting another
// process's write lock would fail at once), or, for a database in a file,
// transactions that do not take the write lock when they begin (BEGIN
// IMMEDIATE, _txlock=immediate with modernc.org/sqlite; without it two
// writers deadlock upgrading a read lock). DSN is a data source name that
// passes.
func CheckDB(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return errors.New("sqliteengine: the database handle is nil")
	}
	if n := db.Stats().MaxOpenConnections; n != 1 {
		return fmt.Errorf("sqliteengine: the handle may open %s connections; idemgate needs exactly one (db.SetMaxOpenConns(1)): "+
			"River's SQLite driver and idemgate's writers queue for it", maxConnsText(n))
	}
	var busy int64
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return fmt.Errorf("sqliteengine: read busy_timeout: %w", translate(err))
	}
	if busy <= 0 {
		return fmt.Errorf("sqliteengine: busy_timeout is 0: a statement meeting another process's write lock would fail at once; "+
			"open the handle with _pragma=busy_timeout(%d)", BusyTimeout.Milliseconds())
	}
	var file string
	if err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file); err != nil {
		return fmt.Errorf("sqliteengine: read the database's file: %w", translate(err))
	}
	if file == "" {
		return nil // in memory: no other connection can take its lock
	}
	immediate, err := beginsImmediate(ctx, db, file)
	if err != nil {
		return err
	}
	if !immediate {
		return errors.New("sqliteengine: the handle's transactions do not take the write lock when they begin; " +
			"open it with _txlock=immediate (BEGIN IMMEDIATE), or two writers may deadlock (SQLITE_BUSY_SNAPSHOT)")
	}
	return nil
}

// beginsImmediate reports whether a transaction begun on db holds the
// write lock of file at once: a second connection's BEGIN IMMEDIATE,
// waiting for nothing, then fails as busy.
func beginsImmediate(ctx context.Context, db *sql.DB, file string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, BusyTimeout+5*time.Second)
	defer cancel()
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(file)
	probe, err := sql.Open(DriverName, "file:"+escaped+"?"+url.Values{"_pragma": {"busy_timeout(0)"}}.Encode())
	if err != nil {
		return false, fmt.Errorf("sqliteengine: open a probe on %s: %w", file, err)
	}
	defer probe.Close()
	probe.SetMaxOpenConns(1)
	conn, err := probe.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("sqliteengine: open a probe on %s: %w", file, translate(err))
	}
	defer conn.Close()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("sqliteengine: begin a transaction: %w", translate(err))
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return true, nil // the handle's transaction holds the lock
	}
	_, _ = conn.ExecContext(ctx, "ROLLBACK")
	return false, nil
}

func maxConnsText(n int) string {
	if n <= 0 {
		return "any number of"
	}
	return fmt.Sprint(n)
}
