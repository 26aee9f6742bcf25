package chaos

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fakeAPI answers every POST "accepted" for the key it got.
func fakeAPI(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"outcome":"accepted","operation":{"operation_id":"op-`+r.Header.Get("Idempotency-Key")+`","status":"queued"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, base, key string) (int, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/tools/apply_credit", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.GetBody = nil
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.ReadAll(resp.Body)
	return resp.StatusCode, nil
}

// TestAPIProxyHoldsOneAcceptedAnswer: disarmed, the proxy passes answers
// through; armed, it holds the next accepted answer, hands it to the
// driver and, once dropped, cuts the client's connection without it.
func TestAPIProxyHoldsOneAcceptedAnswer(t *testing.T) {
	t.Parallel()
	api := fakeAPI(t)
	h := NewHolder()
	p, err := StartAPIProxy(3, strings.TrimPrefix(api.URL, "http://"), h)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	if status, err := post(t, p.URL(), "k1"); err != nil || status != http.StatusAccepted {
		t.Fatalf("disarmed proxy: status %d, error %v; want 202", status, err)
	}

	type result struct {
		status int
		err    error
	}
	got := make(chan result, 1)
	heldCh := make(chan *HeldAnswer, 1)
	go func() { heldCh <- h.Hold(context.Background(), time.Minute) }()
	// Hold arms asynchronously: post until a call is held.
	var held *HeldAnswer
	for i := 0; held == nil; i++ {
		go func() {
			status, err := post(t, p.URL(), "k2")
			got <- result{status, err}
		}()
		select {
		case held = <-heldCh:
		case r := <-got:
			if r.err != nil || r.status != http.StatusAccepted {
				t.Fatalf("a call before the proxy was armed: status %d, error %v", r.status, r.err)
			}
			continue
		}
	}
	if held.Replica != 3 || held.Key != "k2" || held.OperationID != "op-k2" || held.Tool != "apply_credit" {
		t.Fatalf("held %+v", held)
	}
	held.Drop()
	if r := <-got; r.err == nil {
		t.Fatalf("the held call got an answer (%d); want a failed connection", r.status)
	}
	if st := p.Stats(); st.Held != 1 || st.Cut != 0 || st.Refused != 0 {
		t.Fatalf("stats %+v, want one held", st)
	}

	// Disarmed again: answers pass.
	if status, err := post(t, p.URL(), "k3"); err != nil || status != http.StatusAccepted {
		t.Fatalf("after the hold: status %d, error %v; want 202", status, err)
	}
}

// TestAPIProxyRefusedWhileDown: with its replica down, the proxy cuts the
// client's connection, as a direct call to the dead replica would fail.
func TestAPIProxyRefusedWhileDown(t *testing.T) {
	t.Parallel()
	api := fakeAPI(t)
	addr := strings.TrimPrefix(api.URL, "http://")
	api.Close()
	p, err := StartAPIProxy(0, addr, NewHolder())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if status, err := post(t, p.URL(), "k"); err == nil {
		t.Fatalf("got %d through a proxy to a dead replica; want a failed connection", status)
	}
	if st := p.Stats(); st.Refused != 1 {
		t.Fatalf("stats %+v, want one refused", st)
	}
}
