package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// JobClaims finds the operation a River job runs. jobs.Control implements
// it.
type JobClaims interface {
	// JobClaim returns the tenant, tool and idempotency key of the
	// operation job jobID runs; ok is false for a job that runs none
	// (another kind, or one River no longer has).
	JobClaim(ctx context.Context, jobID int64) (tenantID, tool, key string, ok bool, err error)
}

// RiverUIRetryReason is the reason of a re-drive asked for by River UI's
// Retry, in its audit row after the person and the channel.
const RiverUIRetryReason = "job retried in River UI"

// maxRetryBody bounds the body of River UI's retry request (River UI takes
// at most 1000 ids).
const maxRetryBody = 64 << 10

// retry serves River UI's Retry (POST /ops/riverui/api/jobs/retry): a job
// of a failed operation is re-driven through the gate here, in the
// operator's name (its own job retried, or a fresh one, with the redriven
// audit row naming the person and "riverui (via)"); River UI retries the
// other jobs as it would. A refused re-drive (a cancelled operation, say)
// is audited in the operator's name and answered 409 with River UI's error
// shape ({"message": …}), its job left alone.
func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	op, _ := OperatorFromContext(r.Context())
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRetryBody))
	if err != nil {
		writeProblem(w, r, http.StatusBadRequest, vocab.CodeInvalidArgument, "body: "+err.Error())
		return
	}
	var req struct {
		IDs []json.RawMessage `json:"ids"`
	}
	ids := make([]int64, 0)
	if json.Unmarshal(body, &req) == nil {
		for _, raw := range req.IDs {
			id, ok := jobID(raw)
			if !ok {
				ids = nil // River UI answers what it makes of it
				break
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		s.forwardUI(w, r, body)
		return
	}
	var rest []string
	var refused []string
	for _, id := range ids {
		done, refusal, err := s.retryOperation(r.Context(), op, id)
		switch {
		case err != nil:
			s.logger.ErrorContext(r.Context(), "ops: River UI retry failed", "job_id", id, "error", err)
			writeProblem(w, r, http.StatusServiceUnavailable, vocab.CodeUnavailable,
				"the retry of job "+strconv.FormatInt(id, 10)+" did not complete; try again")
			return
		case refusal != "":
			refused = append(refused, "job "+strconv.FormatInt(id, 10)+": "+refusal)
		case !done:
			rest = append(rest, strconv.FormatInt(id, 10))
		}
	}
	if len(rest) > 0 {
		fwd, _ := json.Marshal(map[string][]string{"ids": rest})
		if len(refused) == 0 {
			s.forwardUI(w, r, fwd)
			return
		}
		rec := &recorder{header: http.Header{}}
		s.forwardUI(rec, r, fwd)
		if rec.status >= 300 {
			rec.copyTo(w)
			return
		}
	}
	if len(refused) > 0 {
		// River UI's own error shape, which it shows.
		writeJSON(w, http.StatusConflict, map[string]string{"message": "not retried: " + strings.Join(refused, "; ")})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// retryOperation re-drives the failed operation whose own job is id, in
// op's name: done when it did, a refusal when the gate refused it (the
// refusal is audited), neither for a job River UI retries itself.
func (s *Server) retryOperation(ctx context.Context, op Operator, id int64) (done bool, refusal string, err error) {
	tenantID, tool, key, ok, err := s.jobClaims.JobClaim(ctx, id)
	if err != nil || !ok {
		return false, "", err
	}
	c, err := s.redriver.Gate.Store().ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: tenantID, Tool: tool, IdempotencyKey: key})
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		return false, "", nil
	case err != nil:
		return false, "", err
	case c.JobID != id || c.Status != vocab.StatusFailed:
		// Not this operation's job any more, or nothing to re-drive: the
		// worker finds no run in it.
		return false, "", nil
	}
	line, err := s.redriver.Redrive(ctx, &RedriveParams{TenantID: tenantID, Tool: tool, Key: key,
		Operator: op.Name, Via: op.Channel(ChannelRiverUI), Reason: RiverUIRetryReason})
	switch {
	case Refused(err):
		return false, line.Reason, nil
	case errors.Is(err, vocab.ErrNotFound):
		return false, "", nil
	case err != nil:
		return false, "", err
	}
	s.logger.InfoContext(ctx, "ops: re-drive", "operator", op.Name, "via", op.Channel(ChannelRiverUI), "tenant", tenantID,
		"tool", tool, "operation_id", line.OperationID, "job_id", line.JobID, "fresh_job", line.FreshJob)
	return true, "", nil
}

// forwardUI hands River UI the retry request with body.
func (s *Server) forwardUI(w http.ResponseWriter, r *http.Request, body []byte) {
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	s.ui.ServeHTTP(w, r2)
}

// jobID reads one of River UI's job ids: a string or a number.
func jobID(raw json.RawMessage) (int64, bool) {
	var str string
	if json.Unmarshal(raw, &str) != nil {
		str = string(raw)
	}
	id, err := strconv.ParseInt(str, 10, 64)
	return id, err == nil && id > 0
}

// recorder keeps River UI's answer to a forwarded retry.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	return rec.body.Write(b)
}

func (rec *recorder) copyTo(w http.ResponseWriter) {
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}
