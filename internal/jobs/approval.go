package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/vocab"
	pubjobs "github.com/idemgate/idemgate/jobs"
)

// ApprovalNoticeKind is the kind of the job that mails a tenant's
// approvers of a claim awaiting approval.
const ApprovalNoticeKind = pubjobs.KindPrefix + "approval_notice"

// ApprovalNoticeArgs is the job that mails a tenant's approvers of a claim
// awaiting approval, inserted in the claim's own transaction
// (Enqueuer.ApprovalNoticeInsert): a transactional outbox.
type ApprovalNoticeArgs struct {
	TenantID    string `json:"tenant_id"`
	OperationID string `json:"operation_id"`
}

// Kind implements river.JobArgs.
func (ApprovalNoticeArgs) Kind() string { return ApprovalNoticeKind }

// ApprovalNoticeInsert implements core.ApprovalNoticer: with notices on
// (SetApprovalNotices) it inserts c's ApprovalNoticeArgs job in tx, with a
// claim job's attempts and queue; otherwise it inserts nothing.
func (e *Enqueuer[TTx]) ApprovalNoticeInsert(ctx context.Context, tx core.Tx, c *core.Claim) error {
	if !e.notices.Load() {
		return nil
	}
	rawTx, err := e.tx(tx)
	if err != nil {
		return err
	}
	_, err = e.Client.InsertTx(ctx, rawTx, ApprovalNoticeArgs{TenantID: c.TenantID, OperationID: c.OperationID}, InsertOpts())
	if err != nil {
		return e.wrap(err)
	}
	return nil
}

// SetApprovalNotices turns ApprovalNoticeInsert on or off (default off).
// Turn it on only where the deployment's workers work the notices (an
// ApprovalNoticeWorker is registered): the built-in tools' mailer is
// linked.
func (e *Enqueuer[TTx]) SetApprovalNotices(on bool) { e.notices.Store(on) }

// ErrNoticeRejected marks a notice that cannot be sent as it is (a
// recipient or the message refused, an invalid address): sending it again
// would fail the same way.
var ErrNoticeRejected = errors.New("approval notice rejected")

// ApprovalMailer mails a tenant's approvers the notice of claims awaiting
// approval: the built-in tools' SMTP mailer (internal/vocab/approvalmail).
type ApprovalMailer interface {
	// MailApprovalNotice sends one message about all of cs to all of to,
	// linking each claim to its approval page (links[i] is cs[i]'s); every
	// send of a notice has the same Message-ID, which derives from cs[0].
	// An error that wraps ErrNoticeRejected is permanent; others are
	// transient.
	MailApprovalNotice(ctx context.Context, cs []*core.Claim, to []string, links []string) error
}

// DefaultNoticePeriod is ApprovalNoticeWorker.Period's default: a tenant's
// approvers get at most one notice a minute.
const DefaultNoticePeriod = time.Minute

// The outcomes of an approval notice job (idemgate_approval_notices_total).
const (
	NoticeSent         = "sent"          // mailed
	NoticeNoRecipients = "no_recipients" // the tenant has no approval_mail_to
	NoticeNotAwaiting  = "not_awaiting"  // decided, expired or gone first
	NoticeGathered     = "gathered"      // listed by another operation's notice
	NoticeDeferred     = "deferred"      // waits for the tenant's next period
	NoticeRejected     = "rejected"      // permanent error: not retried
	NoticeRetry        = "retry"         // transient error: River retries
	NoticeGaveUp       = "gave_up"       // transient error on the last attempt
)

// noticeOutcomes are every outcome, for the metric's series.
var noticeOutcomes = []string{NoticeSent, NoticeNoRecipients, NoticeNotAwaiting, NoticeGathered, NoticeDeferred,
	NoticeRejected, NoticeRetry, NoticeGaveUp}

// ApprovalNoticeWorker works ApprovalNoticeArgs: when the claim still
// awaits approval and its tenant has approval_mail_to, it mails them one
// notice linking to PublicURL/approvals/{operation id}, gathered: a
// tenant's approvers get at most one notice per Period. The first waiting
// operation is mailed at once; the jobs of operations that wait within the
// period snooze until it ends, and the first of them to run mails one
// notice listing all of them (each with its link), the others completing
// without a mail (Notices records which notice listed which operation). A
// transient error retries the job, which sends the same notice again; a
// permanent one cancels it, logged.
type ApprovalNoticeWorker struct {
	river.WorkerDefaults[ApprovalNoticeArgs]
	// Store reads the claim. Required.
	Store core.Store
	// Settings reads the tenant's approval_mail_to. Required.
	Settings store.TenantSettings
	// Notices gathers the notices. Required.
	Notices store.ApprovalNotices
	// Period is the least time between two notices of a tenant. Default
	// DefaultNoticePeriod.
	Period time.Duration
	// Mailer sends the notice. Required.
	Mailer ApprovalMailer
	// PublicURL is the api's base URL as people reach it, without a
	// trailing slash (config.Config.PublicURLOrDefault). Required.
	PublicURL string
	// Metrics, when set, counts the notices by outcome.
	Metrics *Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ApprovalLink is the page where an approver decides on operationID, under
// the api's public base URL.
func ApprovalLink(publicURL, operationID string) string {
	return publicURL + "/approvals/" + operationID
}

// Work implements river.Worker.
func (w *ApprovalNoticeWorker) Work(ctx context.Context, job *river.Job[ApprovalNoticeArgs]) error {
	outcome, err := w.work(ctx, job)
	w.Metrics.notice(outcome)
	return err
}

// work is Work, also naming its outcome.
func (w *ApprovalNoticeWorker) work(ctx context.Context, job *river.Job[ApprovalNoticeArgs]) (string, error) {
	a := job.Args
	logger := w.Logger
	if logger == nil {
		logger = slog.Default()
	}
	log := logger.With("job_id", job.ID, "operation_id", a.OperationID, "tenant", a.TenantID)
	c, err := w.Store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: a.TenantID, OperationID: a.OperationID})
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		log.InfoContext(ctx, "approval notice: the operation is gone; nobody is mailed")
		return NoticeNotAwaiting, nil
	case err != nil:
		return w.transient(ctx, job, log, err)
	case c.Status != vocab.StatusAwaitingApproval,
		c.ApprovalExpiresAt != nil && !c.ApprovalExpiresAt.After(time.Now()):
		log.InfoContext(ctx, "approval notice: the operation no longer awaits approval; nobody is mailed", "status", c.Status)
		return NoticeNotAwaiting, nil
	}
	to, err := w.Settings.TenantApprovalMailTo(ctx, a.TenantID)
	if err != nil {
		return w.transient(ctx, job, log, err)
	}
	if len(to) == 0 {
		log.InfoContext(ctx, "approval notice: the tenant has no approval_mail_to; nobody is mailed", "tool", c.Tool)
		return NoticeNoRecipients, nil
	}
	period := w.Period
	if period <= 0 {
		period = DefaultNoticePeriod
	}
	now := time.Now()
	batch, err := w.Notices.ApprovalNoticeReserve(ctx, &store.ApprovalNoticeReserveParams{TenantID: a.TenantID,
		OperationID: a.OperationID, Period: period, Now: now})
	switch {
	case err != nil:
		return w.transient(ctx, job, log, err)
	case batch.Gathered:
		log.InfoContext(ctx, "approval notice: gathered into another operation's notice")
		return NoticeGathered, nil
	case !batch.Due.IsZero():
		wait := batch.Due.Sub(now)
		log.InfoContext(ctx, "approval notice: the tenant's approvers were mailed within the period; gathered into the next notice", "in", wait)
		return NoticeDeferred, river.JobSnooze(wait)
	}
	cs, err := w.waiting(ctx, a, batch.OperationIDs, now)
	if err != nil {
		return w.transient(ctx, job, log, err)
	}
	if len(cs) == 0 {
		log.InfoContext(ctx, "approval notice: no operation of it awaits approval any more; nobody is mailed")
		return NoticeNotAwaiting, nil
	}
	links := make([]string, len(cs))
	for i, c := range cs {
		links[i] = ApprovalLink(w.PublicURL, c.OperationID)
	}
	err = w.Mailer.MailApprovalNotice(ctx, cs, to, links)
	switch {
	case errors.Is(err, ErrNoticeRejected):
		log.ErrorContext(ctx, "approval notice rejected; it is not sent again", "tool", c.Tool, "error", err)
		return NoticeRejected, river.JobCancel(err)
	case err != nil:
		return w.transient(ctx, job, log, err)
	}
	log.InfoContext(ctx, "approval notice sent", "tool", c.Tool, "recipients", len(to), "operations", len(cs))
	return NoticeSent, nil
}

// waiting reads the claims of a notice's operations that still await
// approval at now: the job's own first, then oldest first.
func (w *ApprovalNoticeWorker) waiting(ctx context.Context, a ApprovalNoticeArgs, ids []string, now time.Time) ([]*core.Claim, error) {
	var cs []*core.Claim
	for _, id := range ids {
		c, err := w.Store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: a.TenantID, OperationID: id})
		switch {
		case errors.Is(err, vocab.ErrNotFound):
			continue
		case err != nil:
			return nil, err
		case c.Status != vocab.StatusAwaitingApproval, c.ApprovalExpiresAt != nil && !c.ApprovalExpiresAt.After(now):
			continue
		}
		cs = append(cs, c)
	}
	slices.SortStableFunc(cs, func(x, y *core.Claim) int {
		switch {
		case x.OperationID == a.OperationID:
			return -1
		case y.OperationID == a.OperationID:
			return 1
		}
		return x.CreatedAt.Compare(y.CreatedAt)
	})
	return cs, nil
}

// transient hands a transient error to River, which retries the job until
// its last attempt.
func (w *ApprovalNoticeWorker) transient(ctx context.Context, job *river.Job[ApprovalNoticeArgs], log *slog.Logger, err error) (string, error) {
	if job.Attempt >= job.MaxAttempts {
		log.ErrorContext(ctx, "approval notice not sent after the last attempt; giving up", "attempt", job.Attempt, "error", err)
		return NoticeGaveUp, fmt.Errorf("approval notice: %w", err)
	}
	log.InfoContext(ctx, "approval notice not sent; River retries", "attempt", job.Attempt, "error", err)
	return NoticeRetry, fmt.Errorf("approval notice: %w", err)
}
