package stripetest_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/stripetest"
)

func TestControlClearChargeError(t *testing.T) {
	t.Parallel()
	s, srv := stripetest.Start(t, nil)
	code, _ := control(t, http.MethodPost, srv.URL+"/_charges",
		`{"id":"ch_declined","amount":5000,"fail":{"status":402,"type":"card_error","code":"card_declined"}}`)
	require.Equal(t, http.StatusOK, code)
	_, err := newClient(srv.URL).Refunds.New(refundParams("ch_declined", 100, "idg_clear_0"))
	require.Equal(t, "card_declined", string(stripeErr(t, err).Code))

	code, body := control(t, http.MethodPost, srv.URL+"/_clear_charge_error?id=ch_declined", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ch_declined", body["cleared"])
	r, err := newClient(srv.URL).Refunds.New(refundParams("ch_declined", 100, "idg_clear_1"))
	require.NoError(t, err)
	require.Equal(t, int64(100), r.Amount)
	require.Len(t, s.Refunds(), 1)

	code, _ = control(t, http.MethodPost, srv.URL+"/_clear_charge_error", "")
	require.Equal(t, http.StatusBadRequest, code)
}
