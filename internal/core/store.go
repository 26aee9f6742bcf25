package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Claim is one row of idempotency_claims: the gate's record of one intent.
type Claim struct {
	ID             int64
	OperationID    string
	TenantID       string
	Tool           string
	IdempotencyKey string
	UserID         string
	// Args is the canonical JSON of the validated arguments, without
	// idempotency_key.
	Args json.RawMessage
	// ArgsHash is the hex sha256 of the canonical arguments without the
	// tool's volatile fields.
	ArgsHash       string
	Status         vocab.Status
	Epoch          int64
	LeaseExpiresAt *time.Time
	Attempts       int
	// JobID is the one job allowed to execute this claim; zero before the
	// job is inserted.
	JobID      int64
	Generation int
	// DownstreamKey is the provider's idempotency key of this generation:
	// "idg_" + the intent key (the operation id for claims without one) +
	// "_" + Generation; see DownstreamKey.
	DownstreamKey string
	TTL           time.Duration
	Result        json.RawMessage
	Error         *vocab.ErrorInfo
	LastError     *vocab.ErrorInfo
	// FirstCalledAt is when the first lease of this generation was taken:
	// the start of the downstream's idempotency-key window.
	FirstCalledAt *time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
	ExpiresAt     *time.Time
	// ApprovalExpiresAt is the end of the approval window while the claim
	// awaits approval; nil otherwise. The requester is UserID.
	ApprovalExpiresAt *time.Time
	// ApprovalSummary is the tool's summary of the call for its approver
	// (gate.Mutation.Review), written when it started waiting; "" if none.
	ApprovalSummary string

	// Expired is computed by the store against the database's clock: the
	// claim is terminal and past ExpiresAt.
	Expired bool
	// LeaseLive is computed by the store against the database's clock: the
	// claim is running and its lease has not expired.
	LeaseLive bool
}

// Operation returns the client-visible view of the claim.
func (c *Claim) Operation() *vocab.Operation {
	op := &vocab.Operation{
		OperationID:    c.OperationID,
		Tool:           c.Tool,
		IdempotencyKey: c.IdempotencyKey,
		Status:         c.Status,
		Attempts:       c.Attempts,
		JobID:          c.JobID,
		Result:         c.Result,
		Error:          c.Error,
		Generation:     c.Generation,
		CreatedAt:      c.CreatedAt,
		UpdatedAt:      c.UpdatedAt,
		ExpiresAt:      c.ExpiresAt,
	}
	if !c.Status.Terminal() {
		op.LastError = c.LastError
	}
	if c.Status == vocab.StatusRunning {
		op.LeaseExpiresAt = c.LeaseExpiresAt
	}
	if c.Status == vocab.StatusAwaitingApproval {
		op.Approval = &vocab.Approval{RequestedBy: c.UserID, ExpiresAt: c.ApprovalExpiresAt, Summary: c.ApprovalSummary,
			MayDecide: fmt.Sprintf("a person of tenant %s with scope %s who is not %s", c.TenantID, tokenspec.ScopeApprovalsDecide, c.UserID)}
	}
	return op
}

// AuditEvent is one row of the append-only audit_events table.
type AuditEvent struct {
	ID              int64
	CreatedAt       time.Time
	TenantID        string
	UserID          string
	TokenID         string
	RequestID       string
	ClientRequestID string
	Tool            string
	IdempotencyKey  string
	OperationID     string
	JobID           int64
	Decision        vocab.Decision
	Reason          string
	ArgsHash        string
	Args            json.RawMessage
	Result          json.RawMessage
	Duration        time.Duration
	// TraceID is the trace of the call or job that wrote the row, "" if none.
	TraceID string
}

// Store is what the gate needs of a database. The engine drivers
// (engine/pgengine, engine/sqliteengine) implement it; gate/gatetest
// exercises any implementation.
type Store interface {
	Executor
	// Begin starts a READ COMMITTED (or the engine's nearest) transaction.
	Begin(ctx context.Context) (Tx, error)
}

// Tx is a store transaction. Rollback after Commit is a no-op, so
// `defer tx.Rollback(ctx)` right after Begin is safe.
type Tx interface {
	Executor
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Savepointer is a Tx with savepoints, which a WorkTx needs to hold more
// than one operation; both engines' transactions are. Savepoint marks
// the transaction's state; RollbackToSavepoint undoes everything since
// the latest mark, which stays.
type Savepointer interface {
	Savepoint(ctx context.Context) error
	RollbackToSavepoint(ctx context.Context) error
}

// Pipeliner is a Tx that sends a WorkTx's statements between two effects
// in one round trip (Postgres pipelines them): the previous operation's
// completion when there is one (ClaimComplete with Locked and its audit
// row), a savepoint when asked, and the next operation's ClaimLock.
// completed is the completion's claim. An error wrapping ErrTxBroken
// means the completion or the savepoint failed: the transaction holds
// nothing to keep. Any other error is the lock's, as ClaimLock answers,
// after the savepoint.
// CommitWith sends the last completion with COMMIT: an error wrapping
// ErrTxBroken is the completion's, any other the commit's.
type Pipeliner interface {
	PipelineLock(ctx context.Context, complete *ClaimCompleteParams, savepoint bool, lock *ClaimLeaseParams) (completed, locked *Claim, err error)
	CommitWith(ctx context.Context, complete *ClaimCompleteParams) (completed *Claim, err error)
}

// PipelineBeginner is a Store that begins a WorkTx's transaction with its
// first claim lock in one round trip. The lock answers as ClaimLock does;
// with an error from the lock itself the transaction is returned open,
// for the caller to roll back; with any other, tx is nil.
type PipelineBeginner interface {
	BeginLock(ctx context.Context, lock *ClaimLeaseParams) (tx Tx, locked *Claim, err error)
}

// ErrTxBroken is a Pipeliner's error for a completion or savepoint that
// failed: the operations of the transaction so far cannot be kept.
var ErrTxBroken = errors.New("gate: the group's transaction failed before the next operation")

// Executor runs the gate's statements, on a pool or inside a transaction.
// Every method translates engine errors at the boundary: missing rows are
// vocab.ErrNotFound, failed conditions are vocab.ErrAlreadyExists,
// vocab.ErrStateChanged, vocab.ErrLeaseLost or vocab.ErrLeaseUnavailable,
// and an unreachable database is vocab.ErrUnavailable.
type Executor interface {
	// ClaimInsert inserts a queued claim pointing at JobID, with Audit (when
	// set) in the same statement, unless a claim exists for its identity,
	// or a live tombstone of the same identity and ArgsHash does (the intent
	// ran before and its replay window ended): then it returns
	// vocab.ErrAlreadyExists and writes nothing.
	ClaimInsert(ctx context.Context, params *ClaimInsertParams) (*Claim, error)
	// ClaimInsertMany is ClaimInsert for many rows in one statement where
	// the engine can: claims[i] is the claim written for rows[i], nil where
	// ClaimInsert would have returned vocab.ErrAlreadyExists (also when an
	// earlier row of the same call took the key). Each row's Audit is
	// written only with its claim, naming the row's operation and job. Call it in a transaction; rows are
	// inserted in the order given.
	ClaimInsertMany(ctx context.Context, rows []*ClaimInsertParams) (claims []*Claim, err error)
	// ClaimGetByKey returns the claim of (tenant, tool, key).
	ClaimGetByKey(ctx context.Context, params *ClaimGetByKeyParams) (*Claim, error)
	// FingerprintGuardGet returns the duplicate guard's row of (tenant,
	// tool, fingerprint), or vocab.ErrNotFound.
	FingerprintGuardGet(ctx context.Context, params *FingerprintGuardGetParams) (*FingerprintGuard, error)
	// FingerprintGuardDelete deletes the duplicate guards that name these
	// operations: a group's rows whose guard was upserted but whose claim
	// was not written (ClaimInsertMany), in the same transaction.
	FingerprintGuardDelete(ctx context.Context, operationIDs []string) error
	// ClaimGetByOperation returns the tenant's claim of an operation id,
	// which must be a UUID.
	ClaimGetByOperation(ctx context.Context, params *ClaimGetByOperationParams) (*Claim, error)
	// ClaimGetByID returns a claim by its row id.
	ClaimGetByID(ctx context.Context, params *ClaimGetByIDParams) (*Claim, error)
	// ClaimTakeOver gives an expired terminal claim to a new intent in one
	// conditional statement (or, on engines without data-modifying CTEs,
	// statements in the caller's transaction): new operation id,
	// generation 0, queued, JobID; the old intent's fingerprint goes into
	// the key's history with an archived audit row. It returns
	// vocab.ErrStateChanged if the claim is not terminal and expired (any
	// more).
	ClaimTakeOver(ctx context.Context, params *ClaimTakeOverParams) (*Claim, error)
	// ClaimLease takes the in-flight lease for the claim's job: queued, or
	// running with an expired lease, becomes running with epoch+1 and
	// attempts+1, and Audit (when set) is written with it, atomically: in
	// one statement, or in a transaction of its own when called outside
	// one. Otherwise it returns the claim as it is together with
	// vocab.ErrLeaseUnavailable (vocab.ErrNotFound: there is none).
	ClaimLease(ctx context.Context, params *ClaimLeaseParams) (*Claim, error)
	// ClaimLock is ClaimLease without the write, for a transaction that
	// runs the effect and completes in it: it locks the claim until the
	// transaction ends (on engines with row locks; SQLite's transaction
	// holds the write lock already) when the lease is to be had, and
	// answers like ClaimLease otherwise. Complete it with Locked set.
	ClaimLock(ctx context.Context, params *ClaimLeaseParams) (*Claim, error)
	// ClaimComplete stores the result of a running claim held at Epoch and
	// makes it succeeded, or returns vocab.ErrLeaseLost. With Locked, the
	// claim is one ClaimLock locked in this transaction: queued, or running
	// with an expired lease, still at Epoch, it succeeds taking epoch+1 and
	// attempts+1 as a lease would. Audit, when set, is written with it.
	ClaimComplete(ctx context.Context, params *ClaimCompleteParams) (*Claim, error)
	// ClaimFail stores the error of a running claim held at Epoch and makes
	// it failed, or returns vocab.ErrLeaseLost.
	ClaimFail(ctx context.Context, params *ClaimFailParams) (*Claim, error)
	// ClaimRelease sets a running claim held at Epoch back to queued after a
	// transient error, clearing the lease and keeping the epoch, or returns
	// vocab.ErrLeaseLost.
	ClaimRelease(ctx context.Context, params *ClaimReleaseParams) (*Claim, error)
	// ClaimReclaim sets a running claim whose lease expired (still at Epoch)
	// back to queued and points it at a fresh job, or returns
	// vocab.ErrLeaseLost.
	ClaimReclaim(ctx context.Context, params *ClaimReclaimParams) (*Claim, error)
	// ClaimSettle stores the provider's outcome of a claim whose outcome
	// was unknown: failed with outcome_unknown, or running with an expired
	// lease, at the epoch read (bumped, fencing a late worker).
	// vocab.ErrStateChanged when it no longer is.
	ClaimSettle(ctx context.Context, params *ClaimSettleParams) (*Claim, error)
	// ClaimRedrive sets a failed claim back to queued for an operator, or
	// returns vocab.ErrStateChanged when it is not failed.
	ClaimRedrive(ctx context.Context, params *ClaimRedriveParams) (*Claim, error)
	// ClaimAbandon fails a claim that is not terminal and holds no live lease
	// (queued, or running with an expired lease), still at Epoch and JobID:
	// the reaper's verdict on a claim whose job ended without it. Returns
	// vocab.ErrStateChanged otherwise.
	ClaimAbandon(ctx context.Context, params *ClaimAbandonParams) (*Claim, error)
	// ClaimListOrphaned lists claims that are not terminal, hold no live
	// lease, and whose job has ended (completed, cancelled, discarded) or no
	// longer exists.
	ClaimListOrphaned(ctx context.Context, params *ClaimListOrphanedParams) ([]*Claim, error)
	// ClaimListStalled lists queued claims whose job River reports running
	// since at least StaleAfter: a worker fetched the job and stopped before
	// it took the lease (a live worker takes it within milliseconds).
	ClaimListStalled(ctx context.Context, params *ClaimListStalledParams) ([]*Claim, error)
	// ClaimRepoint points a queued claim, still at Epoch and OldJobID, at a
	// fresh job, or returns vocab.ErrStateChanged.
	ClaimRepoint(ctx context.Context, params *ClaimRepointParams) (*Claim, error)
	// ClaimList lists a tenant's claims, newest first, for operators.
	ClaimList(ctx context.Context, params *ClaimListParams) ([]*Claim, error)
	// ClaimListNewest lists one tenant's claims by creation, newest first
	// (created_at, then id, descending), after a cursor: the pages an agent
	// reads. No claim transition changes the order.
	ClaimListNewest(ctx context.Context, params *ClaimListNewestParams) ([]*Claim, error)
	// JobGet returns what the gate reads of a River job: its state and
	// when it runs next. Lock also locks the row until the transaction
	// ends (on engines with row locks), so that no worker fetches the job
	// meanwhile. A job River no longer has is vocab.ErrNotFound.
	JobGet(ctx context.Context, params *JobGetParams) (*Job, error)
	// ClaimListTerminal returns which of the claims IDs are terminal.
	ClaimListTerminal(ctx context.Context, params *ClaimListTerminalParams) ([]int64, error)
	// ClaimListLeaseExpired lists running claims whose lease expired.
	ClaimListLeaseExpired(ctx context.Context, params *ClaimListLeaseExpiredParams) ([]*Claim, error)
	// ClaimArchiveExpired moves up to Limit terminal claims past their
	// expiry (never a queued or running one) into their keys' history,
	// kept until the claim's retention ends, with an archived audit row
	// each, and returns how many it archived. The claims deleted are
	// exactly the claims kept, under one clock reading. It writes several
	// statements on some engines: call it in a transaction.
	ClaimArchiveExpired(ctx context.Context, params *ClaimArchiveExpiredParams) (int, error)
	// TombstoneGetByKey returns the live history row of one fingerprint
	// (ArgsHash) under (tenant, tool, key), or vocab.ErrNotFound. A key's
	// history holds one row per fingerprint that ran under it within its
	// retention.
	TombstoneGetByKey(ctx context.Context, params *TombstoneGetByKeyParams) (*Tombstone, error)
	// TombstoneDeleteExpired forgets up to Limit history rows past their
	// retention, with a forgotten audit row each, and returns how many it
	// deleted.
	TombstoneDeleteExpired(ctx context.Context, params *TombstoneDeleteExpiredParams) (int, error)
	// ClaimApprove sets a claim awaiting approval, of fingerprint ArgsHash
	// and within its approval window, to queued pointing at JobID (the job
	// inserted in the same transaction), or returns vocab.ErrStateChanged.
	ClaimApprove(ctx context.Context, params *ClaimApproveParams) (*Claim, error)
	// ClaimDecline fails a claim awaiting approval with Error: a denial
	// within its approval window, or (Expired) its expiry once the window
	// ended. Otherwise it returns vocab.ErrStateChanged.
	ClaimDecline(ctx context.Context, params *ClaimDeclineParams) (*Claim, error)
	// ClaimListApprovalExpired lists claims awaiting approval whose window
	// ended, oldest deadline first.
	ClaimListApprovalExpired(ctx context.Context, params *ClaimListApprovalExpiredParams) ([]*Claim, error)
	// ApprovalPendingCount counts the tenant's claims awaiting approval
	// whose window is open. In a transaction it first waits for, and then
	// holds until the transaction ends, the tenant's approval lock, which
	// every such count in a transaction takes (Postgres: an advisory
	// transaction lock; SQLite's write transaction holds the database
	// already): a count and the claim written after it are never
	// interleaved with another's.
	ApprovalPendingCount(ctx context.Context, params *ApprovalPendingCountParams) (int, error)
	// AuditInsert appends one audit row.
	AuditInsert(ctx context.Context, params *AuditInsertParams) error
	// AuditInsertMany appends rows, all or none, in one statement where
	// the engine can.
	AuditInsertMany(ctx context.Context, rows []*AuditInsertParams) error
	// AuditListByKey lists the audit rows of (tenant, tool, key), oldest first.
	AuditListByKey(ctx context.Context, params *AuditListByKeyParams) ([]*AuditEvent, error)
}

// ApprovalPendingCountParams are the parameters of
// Executor.ApprovalPendingCount.
type ApprovalPendingCountParams struct {
	TenantID string
	// Now, when set, replaces the database's clock (tests).
	Now *time.Time
}

// ClaimInsertParams are the parameters of Executor.ClaimInsert.
type ClaimInsertParams struct {
	OperationID    string
	TenantID       string
	Tool           string
	IdempotencyKey string
	UserID         string
	Args           json.RawMessage
	ArgsHash       string
	// IntentKey is the keyed hash of the intent (IntentKeyer.Key) that the
	// claim's downstream key derives from; "" derives it from OperationID.
	IntentKey string
	TTL       time.Duration
	// Retention is how long a tombstone keeps the intent after the TTL.
	Retention time.Duration
	// JobID is the job inserted for the claim in the same transaction;
	// zero for a claim that awaits approval.
	JobID int64
	// ApprovalWindow, when positive, inserts the claim awaiting approval
	// (no job) until the database's now() plus it.
	ApprovalWindow time.Duration
	// ApprovalSummary is the tool's summary for the approver, stored with
	// a claim that waits ("" stores none).
	ApprovalSummary string
	// Audit is the accepted row, written only if the claim is.
	Audit *AuditInsertParams
	// DuplicateWindow, when positive, writes the claim only if the duplicate
	// guard of (TenantID, Tool, ArgsHash) lets it, in the same statement:
	// the guard row is upserted to name this claim (OperationID,
	// IdempotencyKey) until now() plus DuplicateWindow unless it names
	// another key's operation that is within its window or still waiting
	// or running, and is not ConfirmDuplicateOf. A refused insert returns
	// vocab.ErrAlreadyExists like a taken key; FingerprintGuardGet tells
	// which, in the same transaction.
	DuplicateWindow    time.Duration
	ConfirmDuplicateOf string
}

// FingerprintGuard is the duplicate guard's row of a (tenant, tool,
// fingerprint): the intent that last claimed those arguments.
type FingerprintGuard struct {
	OperationID    string
	IdempotencyKey string
	GuardedUntil   time.Time
}

// FingerprintGuardGetParams are the parameters of
// Executor.FingerprintGuardGet.
type FingerprintGuardGetParams struct {
	TenantID string
	Tool     string
	ArgsHash string
}

// ClaimGetByKeyParams are the parameters of Executor.ClaimGetByKey.
type ClaimGetByKeyParams struct {
	TenantID       string
	Tool           string
	IdempotencyKey string
	// Now overrides the database clock for Expired and LeaseLive; tests only.
	Now *time.Time
}

// ClaimGetByOperationParams are the parameters of
// Executor.ClaimGetByOperation.
type ClaimGetByOperationParams struct {
	TenantID    string
	OperationID string
	// Now overrides the database clock for Expired and LeaseLive; tests only.
	Now *time.Time
}

// ClaimGetByIDParams are the parameters of Executor.ClaimGetByID.
type ClaimGetByIDParams struct {
	ID int64
	// Now overrides the database clock for Expired and LeaseLive; tests only.
	Now *time.Time
}

// ClaimTakeOverParams are the parameters of Executor.ClaimTakeOver.
type ClaimTakeOverParams struct {
	ID          int64
	OperationID string
	UserID      string
	Args        json.RawMessage
	ArgsHash    string
	// IntentKey is the new intent's (see ClaimInsertParams.IntentKey).
	IntentKey string
	TTL       time.Duration
	Retention time.Duration
	// JobID is the job inserted for the new intent in the same
	// transaction; zero for an intent that awaits approval.
	JobID int64
	// ApprovalWindow is ClaimInsertParams.ApprovalWindow.
	ApprovalWindow time.Duration
	// ApprovalSummary is ClaimInsertParams.ApprovalSummary.
	ApprovalSummary string
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimLeaseParams are the parameters of Executor.ClaimLease and
// Executor.ClaimLock. A worker knows its claim by the operation its job
// carries.
type ClaimLeaseParams struct {
	TenantID    string
	OperationID string
	// JobID must be the claim's job: any other job may not lease it.
	JobID int64
	// Lease is how long the lease lasts from the database's now().
	Lease time.Duration
	// Now overrides the database clock; tests only.
	Now *time.Time
	// Audit is the started row, written only with the lease; its reason
	// is the store's "attempt N, epoch M" of the leased claim. ClaimLock
	// ignores it.
	Audit *AuditInsertParams
}

// ClaimCompleteParams are the parameters of Executor.ClaimComplete.
type ClaimCompleteParams struct {
	ID     int64
	Epoch  int64
	Result json.RawMessage
	// Locked completes a claim ClaimLock locked in this transaction.
	Locked bool
	// Now overrides the database clock; tests only.
	Now *time.Time
	// Audit is the succeeded row, written only with the completion.
	Audit *AuditInsertParams
}

// ClaimFailParams are the parameters of Executor.ClaimFail.
type ClaimFailParams struct {
	ID    int64
	Epoch int64
	Error vocab.ErrorInfo
	// LeaseExpiredOnly makes the write conditional on an expired lease too
	// (the reaper's give-up).
	LeaseExpiredOnly bool
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimReleaseParams are the parameters of Executor.ClaimRelease.
type ClaimReleaseParams struct {
	ID        int64
	Epoch     int64
	LastError vocab.ErrorInfo
}

// ClaimReclaimParams are the parameters of Executor.ClaimReclaim.
type ClaimReclaimParams struct {
	ID    int64
	Epoch int64
	// JobID is the fresh job that takes over.
	JobID int64
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimSettleParams are the parameters of Executor.ClaimSettle.
type ClaimSettleParams struct {
	ID    int64
	Epoch int64
	// Result succeeds the claim; Error (when set) fails it instead.
	Result json.RawMessage
	Error  *vocab.ErrorInfo
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimRedriveParams are the parameters of Executor.ClaimRedrive.
type ClaimRedriveParams struct {
	ID int64
	// NextGeneration moves to a new downstream key; only after the provider
	// answered definitively that nothing happened.
	NextGeneration bool
	// JobID, when non-zero, points the claim at a fresh job.
	JobID int64
}

// ClaimApproveParams are the parameters of Executor.ClaimApprove.
type ClaimApproveParams struct {
	ID int64
	// ArgsHash is the fingerprint the approver saw.
	ArgsHash string
	// JobID is the job inserted in the approving transaction.
	JobID int64
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimDeclineParams are the parameters of Executor.ClaimDecline.
type ClaimDeclineParams struct {
	ID    int64
	Error vocab.ErrorInfo
	// Expired fails the claim only once its approval window ended (an
	// expiry); without it, only before (a denial).
	Expired bool
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimListApprovalExpiredParams are the parameters of
// Executor.ClaimListApprovalExpired.
type ClaimListApprovalExpiredParams struct {
	Limit int
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimAbandonParams are the parameters of Executor.ClaimAbandon.
type ClaimAbandonParams struct {
	ID    int64
	Epoch int64
	JobID int64
	Error vocab.ErrorInfo
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimListOrphanedParams are the parameters of Executor.ClaimListOrphaned.
type ClaimListOrphanedParams struct {
	Limit int
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimListStalledParams are the parameters of Executor.ClaimListStalled.
type ClaimListStalledParams struct {
	Limit      int
	StaleAfter time.Duration
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimRepointParams are the parameters of Executor.ClaimRepoint.
type ClaimRepointParams struct {
	ID       int64
	Epoch    int64
	OldJobID int64
	NewJobID int64
}

// ClaimListParams are the parameters of Executor.ClaimList. Empty fields
// do not filter.
type ClaimListParams struct {
	TenantID string
	Tool     string
	Status   vocab.Status
	// Since keeps claims updated at or after it.
	Since *time.Time
	// ArgName, when set, keeps claims whose arguments have the top-level
	// member ArgName with the value ArgValue, compared as text (a string's
	// characters, a number's digits): "did we refund ord_9f2 twice?" is
	// ArgName "order_id", ArgValue "ord_9f2". ArgName is
	// [a-z0-9_]{1,64} (ValidArgName).
	ArgName, ArgValue string
	Limit             int
}

// ValidArgName reports whether name may be ClaimListParams.ArgName: the
// lowercase letters, digits and underscores of a tool's argument names.
func ValidArgName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// ClaimListNewestParams are the parameters of Executor.ClaimListNewest.
type ClaimListNewestParams struct {
	// TenantID is required: a page never mixes tenants.
	TenantID string
	// Tool and Status filter when set.
	Tool   string
	Status vocab.Status
	// After, when set, lists only claims older than it: the last claim of
	// the previous page.
	After *ClaimCursor
	Limit int
	// ArgName and ArgValue filter as ClaimListParams's do.
	ArgName, ArgValue string
}

// ClaimCursor is a position in ClaimListNewest's order.
type ClaimCursor struct {
	CreatedAt time.Time
	ID        int64
}

// JobGetParams are the parameters of Executor.JobGet.
type JobGetParams struct {
	ID   int64
	Lock bool
}

// Job is what the gate reads of a River job.
type Job struct {
	ID int64
	// State is River's job state: available, scheduled, retryable,
	// running, completed, cancelled or discarded.
	State string
	// NextRunAt is when River runs the job next, never before the
	// database's now(); nil when the job will not run again by itself
	// (running, or finalized).
	NextRunAt *time.Time
	// CancelRequested is true when River's cancel was asked for the job
	// (JobCancel: River UI, rivercli, the gate's own JobCancelTx), as
	// opposed to a worker ending it: River marks its metadata then.
	CancelRequested bool
}

// ClaimListTerminalParams are the parameters of Executor.ClaimListTerminal.
type ClaimListTerminalParams struct {
	IDs []int64
}

// ClaimListLeaseExpiredParams are the parameters of Executor.ClaimListLeaseExpired.
type ClaimListLeaseExpiredParams struct {
	Limit int
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ClaimArchiveExpiredParams are the parameters of Executor.ClaimArchiveExpired.
type ClaimArchiveExpiredParams struct {
	Limit int
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// TombstoneGetByKeyParams are the parameters of Executor.TombstoneGetByKey.
type TombstoneGetByKeyParams struct {
	TenantID       string
	Tool           string
	IdempotencyKey string
	// ArgsHash is the fingerprint looked up in the key's history.
	ArgsHash string
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// TombstoneDeleteExpiredParams are the parameters of
// Executor.TombstoneDeleteExpired.
type TombstoneDeleteExpiredParams struct {
	Limit int
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// Tombstone is what stays of a claim after its replay window: enough to
// refuse running the same intent again, and to name its outcome.
type Tombstone struct {
	TenantID       string
	Tool           string
	IdempotencyKey string
	ArgsHash       string
	OperationID    string
	Status         vocab.Status
	ErrorCode      vocab.Code
	ExpiredAt      time.Time
	RetainUntil    time.Time
}

// claim is what a tombstone still knows of its operation.
func (t *Tombstone) claim() *Claim {
	c := &Claim{OperationID: t.OperationID, TenantID: t.TenantID, Tool: t.Tool, IdempotencyKey: t.IdempotencyKey,
		ArgsHash: t.ArgsHash, Status: t.Status}
	if t.ErrorCode != "" {
		c.Error = &vocab.ErrorInfo{Code: t.ErrorCode}
	}
	return c
}

// AuditInsertParams are the parameters of Executor.AuditInsert.
type AuditInsertParams struct {
	TenantID  string
	UserID    string
	TokenID   string
	RequestID string
	// ClientRequestID is the caller's X-Request-Id, validated, apart from ours.
	ClientRequestID string
	Tool            string
	IdempotencyKey  string
	OperationID     string
	JobID           int64
	Decision        vocab.Decision
	Reason          string
	ArgsHash        string
	Args            json.RawMessage
	Result          json.RawMessage
	Duration        time.Duration
	// TraceID is the OpenTelemetry trace id (32 hex digits) of the call or
	// job writing the row; "" stores NULL.
	TraceID string
}

// AuditListByKeyParams are the parameters of Executor.AuditListByKey.
type AuditListByKeyParams struct {
	TenantID       string
	Tool           string
	IdempotencyKey string
}
