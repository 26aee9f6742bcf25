package stripetest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/idemgate/idemgate/internal/stripetest"
)

func newClient(baseURL string) *client.API {
	return client.New(stripetest.TestAPIKey, stripetest.Backends(baseURL, nil))
}

func refundParams(charge string, amount int64, key string) *stripe.RefundParams {
	p := &stripe.RefundParams{Charge: stripe.String(charge), Amount: stripe.Int64(amount)}
	if key != "" {
		p.IdempotencyKey = stripe.String(key)
	}
	p.AddMetadata("idemgate_operation_id", "op-"+key)
	return p
}

func stripeErr(t *testing.T, err error) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	return se
}

func replayed(r *stripe.Refund) bool {
	return r.LastResponse != nil && r.LastResponse.Header.Get("Idempotent-Replayed") == "true"
}

func TestCreateAndReplay(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)

	p := refundParams("ch_1", 1200, "idg_op1_0")
	p.Reason = stripe.String("requested_by_customer")
	first, err := sc.Refunds.New(p)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first.ID, "re_"), first.ID)
	require.Equal(t, "refund", first.Object)
	require.EqualValues(t, 1200, first.Amount)
	require.Equal(t, "ch_1", first.Charge.ID)
	require.EqualValues(t, "usd", first.Currency)
	require.EqualValues(t, "succeeded", first.Status)
	require.EqualValues(t, "requested_by_customer", first.Reason)
	require.Equal(t, "op-idg_op1_0", first.Metadata["idemgate_operation_id"])
	require.NotZero(t, first.Created)
	require.False(t, replayed(first))
	raw := string(first.LastResponse.RawJSON)
	for _, secret := range []string{`"fingerprint":"fp_secret"`, `"last4":"4242"`, `"receipt_number":`, `"destination_details":`} {
		require.Contains(t, raw, secret)
	}

	_, err = sc.Refunds.New(refundParams("ch_1", 1200, "idg_op1_0"))
	require.Error(t, err, "other params (no reason) must not replay")
	require.EqualValues(t, stripe.ErrorTypeIdempotency, stripeErr(t, err).Type)

	p2 := refundParams("ch_1", 1200, "idg_op1_0")
	p2.Reason = stripe.String("requested_by_customer")
	second, err := sc.Refunds.New(p2)
	require.NoError(t, err)
	require.Equal(t, first.ID, second.ID)
	require.True(t, replayed(second))
	require.Equal(t, first.LastResponse.RawJSON, second.LastResponse.RawJSON)

	require.Equal(t, map[string]int{"idg_op1_0": 1}, s.RefundsByKey())
	require.Equal(t, map[string]int{"ch_1": 1}, s.RefundsByCharge())
	require.Equal(t, map[string]int{"op-idg_op1_0": 1}, s.RefundsByMetadata("idemgate_operation_id"))
	require.EqualValues(t, 1200, s.RefundedAmount("ch_1"))
	require.Equal(t, 3, s.Requests())
	require.Zero(t, s.MissingKey())
	require.Empty(t, s.ForeignKeys())
	st := s.Stats()
	require.Equal(t, 1, st.Replays)
	require.Equal(t, 1, st.KeyMismatch)
	require.Equal(t, 1, st.RefundsCreated)

	got, err := sc.Refunds.Get(first.ID, nil)
	require.NoError(t, err)
	require.Equal(t, first.ID, got.ID)
	require.EqualValues(t, 1200, got.Amount)
}

func TestSameKeyOtherAmountIsIdempotencyError(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)

	_, err := sc.Refunds.New(refundParams("ch_1", 1000, "idg_k"))
	require.NoError(t, err)
	_, err = sc.Refunds.New(refundParams("ch_1", 2000, "idg_k"))
	se := stripeErr(t, err)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorTypeIdempotency, se.Type)
	require.Contains(t, se.Msg, "same parameters")
	var ie *stripe.IdempotencyError
	require.ErrorAs(t, se.Err, &ie)
	require.Equal(t, map[string]int{"idg_k": 1}, s.RefundsByKey())
	require.EqualValues(t, 1000, s.RefundedAmount("ch_1"))
}

func TestDropThenRetryGetsTheSameRefund(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)

	// Warm a keep-alive connection: Go's transport would transparently
	// resend a keyed request if a reused connection closed silently.
	_, err := sc.Refunds.New(refundParams("ch_1", 100, "idg_warm"))
	require.NoError(t, err)

	s.DropNext(1)
	_, err = sc.Refunds.New(refundParams("ch_1", 700, "idg_drop"))
	require.Error(t, err)
	var se *stripe.Error
	require.NotErrorAs(t, err, &se, "a dropped response is a network error")
	st := s.Stats()
	require.Equal(t, 1, st.Dropped)
	require.Equal(t, 0, st.Replays, "the client must not have resent it by itself")
	require.Equal(t, 1, s.RefundsByKey()["idg_drop"], "applied before the response was lost")

	retry, err := sc.Refunds.New(refundParams("ch_1", 700, "idg_drop"))
	require.NoError(t, err)
	require.True(t, replayed(retry))
	refunds := s.Refunds()
	require.Len(t, refunds, 2)
	require.Equal(t, refunds[1].ID, retry.ID)
	require.Equal(t, "idg_drop", refunds[1].IdempotencyKey)
	require.Equal(t, 1, s.RefundsByKey()["idg_drop"])
	require.EqualValues(t, 800, s.RefundedAmount("ch_1"))
}

func TestDropRateAppliesEveryCreate(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, &stripetest.Options{DropRate: 1, Seed: 7})
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)
	for range 3 {
		_, err := sc.Refunds.New(refundParams("ch_1", 100, "idg_always"))
		require.Error(t, err)
	}
	st := s.Stats()
	require.EqualValues(t, 7, st.Seed)
	require.Equal(t, 3, st.Dropped)
	require.Equal(t, 2, st.Replays)
	require.Equal(t, map[string]int{"idg_always": 1}, st.RefundsByKey)
}

func TestInjectedErrorsApplyNothingAndAreNotStored(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)

	s.FailNext(1, http.StatusServiceUnavailable)
	s.FailNext(1, http.StatusTooManyRequests)
	_, err := sc.Refunds.New(refundParams("ch_1", 500, "idg_f"))
	se := stripeErr(t, err)
	require.Equal(t, http.StatusServiceUnavailable, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorTypeAPI, se.Type)
	_, err = sc.Refunds.New(refundParams("ch_1", 500, "idg_f"))
	se = stripeErr(t, err)
	require.Equal(t, http.StatusTooManyRequests, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorCodeRateLimit, se.Code)
	require.Empty(t, s.RefundsByKey())

	ok, err := sc.Refunds.New(refundParams("ch_1", 500, "idg_f"))
	require.NoError(t, err)
	require.False(t, replayed(ok), "an injected error is not stored under the key")
	require.Equal(t, 2, s.Stats().InjectedErrors)

	s2, ts2 := stripetest.Start(t, &stripetest.Options{ErrorRate: 1})
	s2.AddCharge("ch_1", 5000, "usd")
	_, err = newClient(ts2.URL).Refunds.New(refundParams("ch_1", 500, "idg_g"))
	se = stripeErr(t, err)
	require.Equal(t, http.StatusInternalServerError, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorTypeAPI, se.Type)
	require.Empty(t, s2.Refunds())
}

func TestHoldReleaseAndConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)

	applied, release := s.HoldNext()
	type result struct {
		r   *stripe.Refund
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := sc.Refunds.New(refundParams("ch_1", 900, "idg_hold"))
		done <- result{r, err}
	}()
	var id string
	select {
	case id = <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("hold was not applied")
	}
	require.Equal(t, map[string]int{"idg_hold": 1}, s.RefundsByKey(), "applied while held")

	_, err := sc.Refunds.New(refundParams("ch_1", 900, "idg_hold"))
	se := stripeErr(t, err)
	require.Equal(t, http.StatusConflict, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorCodeIdempotencyKeyInUse, se.Code)
	require.Equal(t, 1, s.Stats().KeyInUse)
	select {
	case <-done:
		t.Fatal("held request answered before release")
	default:
	}

	release()
	release() // idempotent
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, id, res.r.ID)

	again, err := sc.Refunds.New(refundParams("ch_1", 900, "idg_hold"))
	require.NoError(t, err)
	require.True(t, replayed(again))
	require.Equal(t, id, again.ID)
	require.Equal(t, map[string]int{"idg_hold": 1}, s.RefundsByKey())
	require.Equal(t, 1, s.Stats().Held)
}

func TestHoldThenClientGoesAway(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)

	applied, release := s.HoldNext()
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		p := refundParams("ch_1", 400, "idg_killed")
		p.Context = ctx
		_, err := sc.Refunds.New(p)
		errc <- err
	}()
	id := <-applied
	cancel() // the worker dies between Stripe applying and answering
	require.Error(t, <-errc)

	// The response is stored once the handler notices; the reclaimed worker
	// retries with the same key and gets the same refund.
	require.Eventually(t, func() bool {
		_, _, ok := s.StoredResponse("idg_killed")
		return ok
	}, 60*time.Second, 10*time.Millisecond)
	r, err := sc.Refunds.New(refundParams("ch_1", 400, "idg_killed"))
	require.NoError(t, err)
	require.True(t, replayed(r))
	require.Equal(t, id, r.ID)
	require.Len(t, s.Refunds(), 1)
}

func TestReleaseBeforeUseDisarms(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	_, release := s.HoldNext()
	release()
	require.Zero(t, s.Stats().PendingHolds)
	_, err := newClient(ts.URL).Refunds.New(refundParams("ch_1", 1, "idg_nohold"))
	require.NoError(t, err)
	require.Zero(t, s.Stats().Held)
}

func TestConcurrentDuplicatesCreateOneRefund(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, &stripetest.Options{Delay: 5 * time.Millisecond})
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)

	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]int{}
	var errs []error
	for range 20 {
		wg.Go(func() {
			r, err := sc.Refunds.New(refundParams("ch_1", 1000, "idg_dup"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids[r.ID]++
		})
	}
	wg.Wait()
	for _, err := range errs {
		se := stripeErr(t, err)
		require.Equal(t, http.StatusConflict, se.HTTPStatusCode)
		require.EqualValues(t, stripe.ErrorCodeIdempotencyKeyInUse, se.Code)
	}
	conflicts := len(errs)
	require.Len(t, ids, 1, "every success names the same refund")
	require.Equal(t, map[string]int{"idg_dup": 1}, s.RefundsByKey())
	require.EqualValues(t, 1000, s.RefundedAmount("ch_1"))
	require.Equal(t, conflicts, s.Stats().KeyInUse)
}

func TestChargeErrors(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	s.AddCharge("ch_declined", 5000, "usd")
	s.SetChargeError("ch_declined", 0, "", "")
	sc := newClient(ts.URL)

	_, err := sc.Refunds.New(refundParams("ch_1", 3000, "idg_a"))
	require.NoError(t, err)
	_, err = sc.Refunds.New(refundParams("ch_1", 3000, "idg_b"))
	se := stripeErr(t, err)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorTypeInvalidRequest, se.Type)
	require.EqualValues(t, stripe.ErrorCodeAmountTooLarge, se.Code)
	require.Equal(t, "amount", se.Param)
	require.Contains(t, se.Msg, "($20.00)")

	// Omitted amount refunds the rest.
	rest, err := sc.Refunds.New(&stripe.RefundParams{Charge: stripe.String("ch_1"),
		Params: stripe.Params{IdempotencyKey: stripe.String("idg_c")}})
	require.NoError(t, err)
	require.EqualValues(t, 2000, rest.Amount)

	_, err = sc.Refunds.New(refundParams("ch_1", 1, "idg_d"))
	se = stripeErr(t, err)
	require.EqualValues(t, stripe.ErrorCodeChargeAlreadyRefunded, se.Code)

	_, err = sc.Refunds.New(refundParams("ch_nope", 1, "idg_e"))
	se = stripeErr(t, err)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorCodeResourceMissing, se.Code)
	require.Equal(t, "charge", se.Param)
	// An executed request's error is stored and replayed, even once the
	// charge exists.
	s.AddCharge("ch_nope", 100, "usd")
	_, err = sc.Refunds.New(refundParams("ch_nope", 1, "idg_e"))
	se = stripeErr(t, err)
	require.EqualValues(t, stripe.ErrorCodeResourceMissing, se.Code)
	require.Equal(t, "true", se.LastResponse.Header.Get("Idempotent-Replayed"))

	_, err = sc.Refunds.New(refundParams("ch_declined", 100, "idg_f"))
	se = stripeErr(t, err)
	require.Equal(t, http.StatusPaymentRequired, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorTypeCard, se.Type)
	require.EqualValues(t, stripe.ErrorCodeCardDeclined, se.Code)
	var ce *stripe.CardError
	require.ErrorAs(t, se.Err, &ce)

	require.Equal(t, map[string]int{"idg_a": 1, "idg_c": 1}, s.RefundsByKey())
	require.EqualValues(t, 5000, s.RefundedAmount("ch_1"))
}

func TestListAndGet(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_a", 10000, "usd")
	s.AddCharge("ch_b", 10000, "eur")
	sc := newClient(ts.URL)
	var want []string
	for i, key := range []string{"idg_1", "idg_2", "idg_3"} {
		r, err := sc.Refunds.New(refundParams("ch_a", int64(100*(i+1)), key))
		require.NoError(t, err)
		want = append([]string{r.ID}, want...) // newest first
	}
	other, err := sc.Refunds.New(refundParams("ch_b", 50, "idg_4"))
	require.NoError(t, err)
	require.EqualValues(t, "eur", other.Currency)

	lp := &stripe.RefundListParams{Charge: stripe.String("ch_a")}
	lp.Limit = stripe.Int64(2) // forces a second page via starting_after
	it := sc.Refunds.List(lp)
	var got []string
	for it.Next() {
		r := it.Refund()
		require.Equal(t, "ch_a", r.Charge.ID)
		require.True(t, strings.HasPrefix(r.Metadata["idemgate_operation_id"], "op-idg_"))
		got = append(got, r.ID)
	}
	require.NoError(t, it.Err())
	require.Equal(t, want, got)

	single := &stripe.RefundListParams{Charge: stripe.String("ch_a")}
	single.Limit = stripe.Int64(2)
	single.Single = true
	it = sc.Refunds.List(single)
	n := 0
	for it.Next() {
		n++
	}
	require.NoError(t, it.Err())
	require.Equal(t, 2, n)
	require.True(t, it.RefundList().HasMore)
	require.Equal(t, "/v1/refunds", it.RefundList().URL)

	it = sc.Refunds.List(&stripe.RefundListParams{Charge: stripe.String("ch_none")})
	require.False(t, it.Next())
	require.NoError(t, it.Err())

	_, err = sc.Refunds.Get("re_missing", nil)
	se := stripeErr(t, err)
	require.Equal(t, http.StatusNotFound, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorCodeResourceMissing, se.Code)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, &stripetest.Options{APIKey: "sk_test_only"})
	s.AddCharge("ch_1", 5000, "usd")

	_, err := newClient(ts.URL).Refunds.New(refundParams("ch_1", 1, "idg_x")) // TestAPIKey
	se := stripeErr(t, err)
	require.Equal(t, http.StatusUnauthorized, se.HTTPStatusCode)
	require.EqualValues(t, stripe.ErrorTypeInvalidRequest, se.Type)

	res := post(t, ts.URL+"/v1/refunds", "", "idg_y", url.Values{"charge": {"ch_1"}})
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Contains(t, res.body, "did not provide an API key")

	ok, err := client.New("sk_test_only", stripetest.Backends(ts.URL, nil)).Refunds.New(refundParams("ch_1", 1, "idg_x"))
	require.NoError(t, err)
	require.False(t, replayed(ok), "a 401 is not stored under the key")
}

type rawResponse struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, u, apiKey, idemKey string, form url.Values) rawResponse {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return rawResponse{res.StatusCode, res.Header, string(b)}
}

func TestMissingAndForeignKeys(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")

	res := post(t, ts.URL+"/v1/refunds", stripetest.TestAPIKey, "", url.Values{"charge": {"ch_1"}, "amount": {"10"}})
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Equal(t, 1, s.MissingKey())

	// stripe-go invents a random key when none is set.
	_, err := newClient(ts.URL).Refunds.New(&stripe.RefundParams{Charge: stripe.String("ch_1"), Amount: stripe.Int64(10)})
	require.NoError(t, err)
	require.Len(t, s.ForeignKeys(), 1)
	require.Equal(t, 1, s.MissingKey())
	require.Len(t, s.Refunds(), 2)
	require.Empty(t, s.RefundsByKey()[""])
}

func TestValidationErrorsAreNotStored(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	u := ts.URL + "/v1/refunds"

	for _, tc := range []struct {
		form  url.Values
		code  string
		param string
	}{
		{url.Values{"charge": {"ch_1"}, "bogus": {"1"}}, "parameter_unknown", "bogus"},
		{url.Values{"charge": {"ch_1"}, "amount": {"x"}}, "parameter_invalid_integer", "amount"},
		{url.Values{"charge": {"ch_1"}, "amount": {"0"}}, "parameter_invalid_integer", "amount"},
		{url.Values{"amount": {"10"}}, "parameter_missing", ""},
		{url.Values{"charge": {"ch_1"}, "reason": {"because"}}, "", "reason"},
		{url.Values{"charge": {"ch_1"}, "metadata[" + strings.Repeat("k", 41) + "]": {"v"}}, "", "metadata[" + strings.Repeat("k", 41) + "]"},
	} {
		res := post(t, u, stripetest.TestAPIKey, "idg_v", tc.form)
		require.Equal(t, http.StatusBadRequest, res.status, res.body)
		var e struct {
			Error struct{ Type, Code, Param string }
		}
		require.NoError(t, json.Unmarshal([]byte(res.body), &e))
		require.Equal(t, "invalid_request_error", e.Error.Type)
		require.Equal(t, tc.code, e.Error.Code, res.body)
		require.Equal(t, tc.param, e.Error.Param, res.body)
	}
	res := post(t, u, stripetest.TestAPIKey, "idg_v", url.Values{"charge": {"ch_1"}, "amount": {"10"}, "metadata[a]": {"b"}, "expand[0]": {"charge"}})
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Empty(t, res.header.Get("Idempotent-Replayed"))
	require.Equal(t, "idg_v", res.header.Get("Idempotency-Key"))
	require.True(t, strings.HasPrefix(res.header.Get("Request-Id"), "req_"))

	// Parameter order does not matter for the replay.
	res2, err := http.NewRequest(http.MethodPost, u, strings.NewReader("metadata%5Ba%5D=b&expand%5B0%5D=charge&amount=10&charge=ch_1"))
	require.NoError(t, err)
	res2.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res2.SetBasicAuth(stripetest.TestAPIKey, "")
	res2.Header.Set("Idempotency-Key", "idg_v")
	hr, err := http.DefaultClient.Do(res2)
	require.NoError(t, err)
	_ = hr.Body.Close()
	require.Equal(t, http.StatusOK, hr.StatusCode)
	require.Equal(t, "true", hr.Header.Get("Idempotent-Replayed"))

	res = post(t, ts.URL+"/v1/charges", stripetest.TestAPIKey, "", url.Values{})
	require.Equal(t, http.StatusNotFound, res.status)
}

func TestExpiredKeyExecutesAgain(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(ts.URL)
	_, err := sc.Refunds.New(refundParams("ch_1", 100, "idg_old"))
	require.NoError(t, err)
	require.True(t, s.ExpireKey("idg_old"))
	require.False(t, s.ExpireKey("idg_old"))
	r, err := sc.Refunds.New(refundParams("ch_1", 100, "idg_old"))
	require.NoError(t, err)
	require.False(t, replayed(r))
	require.Equal(t, map[string]int{"idg_old": 2}, s.RefundsByKey(), "past Stripe's key window only reconciliation prevents a second refund")
	require.Equal(t, map[string]int{"op-idg_old": 2}, s.RefundsByMetadata("idemgate_operation_id"))
}

func control(t *testing.T, method, u, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

func TestControlEndpoints(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, &stripetest.Options{AutoChargeAmount: 300})
	sc := newClient(ts.URL)

	status, _ := control(t, http.MethodPost, ts.URL+"/_charges", `[{"id":"ch_c","amount":1000},{"id":"ch_d","amount":1000,"fail":{"status":402,"type":"card_error","code":"expired_card"}}]`)
	require.Equal(t, http.StatusOK, status)
	_, err := sc.Refunds.New(refundParams("ch_d", 1, "idg_d"))
	require.EqualValues(t, "expired_card", stripeErr(t, err).Code)
	auto, err := sc.Refunds.New(&stripe.RefundParams{Charge: stripe.String("ch_auto"), Params: stripe.Params{IdempotencyKey: stripe.String("idg_auto")}})
	require.NoError(t, err)
	require.EqualValues(t, 300, auto.Amount)

	status, _ = control(t, http.MethodGet, ts.URL+"/_held?timeout=10ms", "")
	require.Equal(t, http.StatusNotFound, status)
	status, out := control(t, http.MethodPost, ts.URL+"/_hold", "")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 1, out["armed"])
	status, _ = control(t, http.MethodGet, ts.URL+"/_held?timeout=10ms", "")
	require.Equal(t, http.StatusGatewayTimeout, status)

	done := make(chan *stripe.Refund, 1)
	go func() {
		r, err := sc.Refunds.New(refundParams("ch_c", 250, "idg_remote"))
		if err != nil {
			r = nil
		}
		done <- r
	}()
	status, out = control(t, http.MethodGet, ts.URL+"/_held?timeout=10s", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "idg_remote", out["idempotency_key"])
	require.Equal(t, "ch_c", out["charge"])
	id := out["refund_id"].(string)
	status, out = control(t, http.MethodPost, ts.URL+"/_release", "")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 1, out["released"])
	r := <-done
	require.NotNil(t, r)
	require.Equal(t, id, r.ID)

	status, _ = control(t, http.MethodPost, ts.URL+"/_fail?n=1&status=503", "")
	require.Equal(t, http.StatusOK, status)
	_, err = sc.Refunds.New(refundParams("ch_c", 1, "idg_z"))
	require.Equal(t, http.StatusServiceUnavailable, stripeErr(t, err).HTTPStatusCode)
	status, _ = control(t, http.MethodPost, ts.URL+"/_drop?n=1", "")
	require.Equal(t, http.StatusOK, status)
	_, err = sc.Refunds.New(refundParams("ch_c", 1, "idg_z"))
	require.Error(t, err)
	status, out = control(t, http.MethodPost, ts.URL+"/_expire_keys?key=idg_z", "")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 1, out["expired"])

	status, out = control(t, http.MethodGet, ts.URL+"/_stats", "")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 1, out["dropped"])
	require.EqualValues(t, 1, out["held"])
	require.EqualValues(t, 1, out["injected_errors"])
	require.EqualValues(t, map[string]any{"idg_auto": 1.0, "idg_remote": 1.0, "idg_z": 1.0}, out["refunds_by_key"])
	require.EqualValues(t, 251, out["refunded_amount"].(map[string]any)["ch_c"])
	require.Equal(t, s.Stats().Requests, int(out["requests"].(float64)))

	status, _ = control(t, http.MethodPost, ts.URL+"/_nope", "")
	require.Equal(t, http.StatusNotFound, status)
}

func TestCloseReleasesHolds(t *testing.T) {
	t.Parallel()
	s, ts := stripetest.Start(t, nil)
	s.AddCharge("ch_1", 5000, "usd")
	applied, _ := s.HoldNext()
	errc := make(chan error, 1)
	go func() {
		_, err := newClient(ts.URL).Refunds.New(refundParams("ch_1", 1, "idg_close"))
		errc <- err
	}()
	<-applied
	s.Close()
	require.NoError(t, <-errc)
}
