package jobs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/vocab"
)

// noticeStore is a core.Store that only reads one claim, and the tenant's
// settings.
type noticeStore struct {
	core.Store
	claim  *core.Claim
	err    error
	mailTo []string
	batch  *store.ApprovalNoticeBatch
}

func (s *noticeStore) ClaimGetByOperation(_ context.Context, p *core.ClaimGetByOperationParams) (*core.Claim, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.claim == nil || p.OperationID != s.claim.OperationID || p.TenantID != s.claim.TenantID {
		return nil, vocab.ErrNotFound
	}
	return s.claim, nil
}

// ApprovalNoticeReserve lists the one claim, or answers batch when set.
func (s *noticeStore) ApprovalNoticeReserve(_ context.Context, p *store.ApprovalNoticeReserveParams) (*store.ApprovalNoticeBatch, error) {
	if s.batch != nil {
		return s.batch, nil
	}
	return &store.ApprovalNoticeBatch{OperationIDs: []string{p.OperationID}}, nil
}

func (s *noticeStore) TenantApprovalMailTo(context.Context, string) ([]string, error) {
	return s.mailTo, nil
}

// fakeMailer records the notices and answers err.
type fakeMailer struct {
	err   error
	sent  int
	to    []string
	link  string
	claim *core.Claim
}

func (m *fakeMailer) MailApprovalNotice(_ context.Context, cs []*core.Claim, to []string, links []string) error {
	m.claim, m.to, m.link = cs[0], to, links[0]
	if m.err != nil {
		return m.err
	}
	m.sent++
	return nil
}

// TestApprovalNoticeWorker: what the notice job does in each case, and how
// it ends for River.
func TestApprovalNoticeWorker(t *testing.T) {
	t.Parallel()
	const op = "00000000-0000-4000-8000-000000000001"
	waiting := func() *core.Claim {
		until := time.Now().Add(time.Hour)
		return &core.Claim{OperationID: op, TenantID: "acme", Tool: "refund_order", Status: vocab.StatusAwaitingApproval,
			ApprovalExpiresAt: &until}
	}
	approved := waiting()
	approved.Status, approved.ApprovalExpiresAt = vocab.StatusQueued, nil
	ended := waiting()
	ended.ApprovalExpiresAt = new(time.Now().Add(-time.Second))
	rejected := errors.New("550 no such user")
	for _, tc := range []struct {
		name    string
		store   *noticeStore
		mailErr error
		attempt int
		outcome string
		sent    int
		// check checks Work's error.
		check func(t *testing.T, err error)
	}{
		{name: "Sent", store: &noticeStore{claim: waiting(), mailTo: []string{"fin@acme.example"}}, outcome: NoticeSent, sent: 1},
		{name: "NoRecipients", store: &noticeStore{claim: waiting()}, outcome: NoticeNoRecipients},
		{name: "Decided", store: &noticeStore{claim: approved, mailTo: []string{"fin@acme.example"}}, outcome: NoticeNotAwaiting},
		{name: "WindowEnded", store: &noticeStore{claim: ended, mailTo: []string{"fin@acme.example"}}, outcome: NoticeNotAwaiting},
		{name: "Gone", store: &noticeStore{mailTo: []string{"fin@acme.example"}}, outcome: NoticeNotAwaiting},
		{name: "StoreDown", store: &noticeStore{err: vocab.ErrUnavailable}, outcome: NoticeRetry,
			check: func(t *testing.T, err error) { require.ErrorIs(t, err, vocab.ErrUnavailable) }},
		{name: "Rejected", store: &noticeStore{claim: waiting(), mailTo: []string{"fin@acme.example"}},
			mailErr: errors.Join(ErrNoticeRejected, rejected), outcome: NoticeRejected,
			check: func(t *testing.T, err error) {
				var cancel *rivertype.JobCancelError
				require.ErrorAs(t, err, &cancel, "cancelled: not retried")
				require.ErrorIs(t, err, rejected)
			}},
		{name: "Transient", store: &noticeStore{claim: waiting(), mailTo: []string{"fin@acme.example"}},
			mailErr: errors.New("connection refused"), outcome: NoticeRetry,
			check: func(t *testing.T, err error) {
				var cancel *rivertype.JobCancelError
				require.Error(t, err)
				require.False(t, errors.As(err, &cancel), "River retries it")
			}},
		{name: "TransientOnTheLastAttempt", store: &noticeStore{claim: waiting(), mailTo: []string{"fin@acme.example"}},
			mailErr: errors.New("connection refused"), attempt: 10, outcome: NoticeGaveUp,
			check: func(t *testing.T, err error) { require.ErrorContains(t, err, "connection refused") }},
		{name: "Gathered", store: &noticeStore{claim: waiting(), mailTo: []string{"fin@acme.example"}, batch: &store.ApprovalNoticeBatch{Gathered: true}},
			outcome: NoticeGathered},
		{name: "Deferred", store: &noticeStore{claim: waiting(), mailTo: []string{"fin@acme.example"},
			batch: &store.ApprovalNoticeBatch{Due: time.Now().Add(time.Minute)}}, outcome: NoticeDeferred,
			check: func(t *testing.T, err error) {
				var snooze *rivertype.JobSnoozeError
				require.ErrorAs(t, err, &snooze, "snoozed until the period ends")
				require.Positive(t, snooze.Duration)
				require.LessOrEqual(t, snooze.Duration, time.Minute, "until Due, not longer")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			metrics, err := NewMetrics(prometheus.NewRegistry())
			require.NoError(t, err)
			mailer := &fakeMailer{err: tc.mailErr}
			w := &ApprovalNoticeWorker{Store: tc.store, Settings: tc.store, Notices: tc.store, Mailer: mailer, PublicURL: "https://idemgate.example.com",
				Metrics: metrics, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			attempt := tc.attempt
			if attempt == 0 {
				attempt = 1
			}
			err = w.Work(t.Context(), &river.Job[ApprovalNoticeArgs]{
				JobRow: &rivertype.JobRow{ID: 7, Attempt: attempt, MaxAttempts: MaxAttempts},
				Args:   ApprovalNoticeArgs{TenantID: "acme", OperationID: op},
			})
			if tc.check != nil {
				tc.check(t, err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.sent, mailer.sent)
			if tc.sent > 0 {
				require.Equal(t, []string{"fin@acme.example"}, mailer.to)
				require.Equal(t, "https://idemgate.example.com/approvals/"+op, mailer.link)
				require.Equal(t, op, mailer.claim.OperationID)
			}
			for _, o := range noticeOutcomes {
				want := 0.0
				if o == tc.outcome {
					want = 1
				}
				require.Equal(t, want, testutil.ToFloat64(metrics.notices.WithLabelValues(o)), "outcome %s", o)
			}
		})
	}
}
