package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/stripetest"
)

// RunInfo is what the driver measured while the load ran.
type RunInfo struct {
	Seed        int64
	Duration    time.Duration
	KillEvery   time.Duration
	Workers     int
	Kills       int
	KillsByKind map[string]int
	// Targeted lists the kills that hit a worker holding an applied effect.
	Targeted []TargetedKill
	// SlowAfter is the latency above which an operation is listed in the
	// notes with its audit trail.
	SlowAfter     time.Duration
	WorkerStarts  int
	WorkerExits   []string
	PGRestarts    int
	PGOutage      time.Duration
	PGRestartErr  string
	Drain         time.Duration
	DrainDeadline time.Duration
	DrainMissed   bool
	Elapsed       time.Duration

	// APIs is the number of api replicas; APIKillEvery the mean interval
	// between their kills (0: none).
	APIs           int
	APIKillEvery   time.Duration
	APIKills       int
	APIKillsByKind map[string]int
	APIStarts      int
	// APIExits lists api replicas that exited by themselves: a failure.
	APIExits []string
	// HeldAnswers are the accepted answers a proxy held while the driver
	// killed the replica that gave them.
	HeldAnswers []HeldKill
	// Proxy sums what the proxies did to the clients' requests.
	Proxy ProxyStats
}

// HeldKill is an accepted answer that never reached its client: its
// replica was killed after the claim committed.
type HeldKill struct {
	Tool, Key, OperationID string
	Replica                int
}

// TargetedKill is a kill of the worker whose effect (downstream key Key)
// was applied but not yet answered.
type TargetedKill struct {
	Kind string
	Key  string
	At   time.Time
}

// Sources are where the effects land.
type Sources struct {
	DatabaseURL string
	StripeURL   string
	MailpitURL  string
	// Webhooks: the test Stripe sent its signed webhooks to the api; the
	// provider's side is counted too.
	Webhooks bool
}

// Report is the verdict: the table's rows, the violations that fail the
// run, and notes that do not.
type Report struct {
	Rows       [][2]string
	Violations []string
	Notes      []string
	// Trails holds the audit trail of operations named in violations.
	Trails []string
}

type claimRow struct {
	opID, status, code string
	attempts           int
}

// Check counts every effect where it landed and compares it with what the
// clients were told.
func Check(ctx context.Context, src Sources, info *RunInfo, results []*Result) (*Report, error) {
	conn, err := connect(ctx, src.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())

	claims := map[[2]string]claimRow{}
	rows, err := conn.Query(ctx, `SELECT tool, idempotency_key, operation_id::text, status, attempts, coalesce(error->>'code', '')
		FROM idempotency_claims WHERE tenant_id = $1`, Tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var tool, key string
		var c claimRow
		if err := rows.Scan(&tool, &key, &c.opID, &c.status, &c.attempts, &c.code); err != nil {
			return nil, err
		}
		claims[[2]string{tool, key}] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	perOp := func(q string) (map[string]int, error) {
		m := map[string]int{}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int
			if err := rows.Scan(&k, &n); err != nil {
				return nil, err
			}
			m[k] = n
		}
		return m, rows.Err()
	}
	ledger, err := perOp(`SELECT operation_id::text, count(*) FROM ledger_entries GROUP BY 1`)
	if err != nil {
		return nil, err
	}
	seatResets, err := perOp(`SELECT operation_id::text, count(*) FROM seat_resets GROUP BY 1`)
	if err != nil {
		return nil, err
	}
	seatCounts, err := perOp(`SELECT seat_id, reset_count FROM seats WHERE tenant_id = '` + Tenant + `'`)
	if err != nil {
		return nil, err
	}
	dbRefunds, err := perOp(`SELECT operation_id::text, count(*) FROM refunds GROUP BY 1`)
	if err != nil {
		return nil, err
	}
	refunded, err := perOp(`SELECT order_id, refunded_cents FROM orders WHERE tenant_id = '` + Tenant + `'`)
	if err != nil {
		return nil, err
	}
	reclaimsPerOp, err := perOp(`SELECT operation_id::text, count(*) FROM audit_events WHERE decision = 'reclaimed' AND operation_id IS NOT NULL GROUP BY 1`)
	if err != nil {
		return nil, err
	}
	var reclaims int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE decision = 'reclaimed'`).Scan(&reclaims); err != nil {
		return nil, err
	}
	pendingJobs, err := perOp(`SELECT state::text, count(*) FROM river_job
		WHERE kind IN ('idemgate.refund_order', 'idemgate.apply_credit', 'idemgate.reset_seat', 'idemgate.send_password_reset')
		  AND state NOT IN ('completed', 'cancelled', 'discarded') GROUP BY 1`)
	if err != nil {
		return nil, err
	}

	var reaperGapSecs float64
	if err := conn.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM max(gap)), 0)::float8 FROM (
		SELECT attempted_at - lag(attempted_at) OVER (ORDER BY attempted_at) AS gap
		FROM river_job WHERE kind = 'idemgate.reaper' AND attempted_at IS NOT NULL) g`).Scan(&reaperGapSecs); err != nil {
		return nil, err
	}
	reaperGap := time.Duration(reaperGapSecs * float64(time.Second))
	type recovery struct {
		d        time.Duration
		attempts int
		status   string
	}
	recoveries := map[string][]recovery{}
	for _, t := range info.Targeted {
		var done time.Time
		var rc recovery
		if err := conn.QueryRow(ctx, `SELECT updated_at, attempts, status FROM idempotency_claims WHERE downstream_key = $1`, t.Key).
			Scan(&done, &rc.attempts, &rc.status); err != nil {
			return nil, fmt.Errorf("claim of targeted key %s: %w", t.Key, err)
		}
		rc.d = done.Sub(t.At)
		recoveries[t.Kind] = append(recoveries[t.Kind], rc)
	}

	stats, err := stripeStats(ctx, src.StripeURL)
	if err != nil {
		return nil, err
	}
	stripeByOp := stats.RefundsByMetadata["idemgate_operation_id"]

	msgs, err := mailpit.New(src.MailpitURL).Messages(ctx)
	if err != nil {
		return nil, err
	}
	// A Message-ID is "<downstream key>@domain"; the downstream key names
	// the intent key (or, for claims without one, the operation id), which
	// the claims map back to their operation.
	opOfKey := map[string]string{}
	keyRows, err := conn.Query(ctx, `SELECT operation_id::text, downstream_key FROM idempotency_claims`)
	if err != nil {
		return nil, err
	}
	for keyRows.Next() {
		var op, key string
		if err := keyRows.Scan(&op, &key); err != nil {
			keyRows.Close()
			return nil, err
		}
		if k := opFromMessageID(key); k != "" {
			opOfKey[k] = op
		}
	}
	keyRows.Close()
	if err := keyRows.Err(); err != nil {
		return nil, err
	}
	mailsByMsgID := map[string]int{}
	mailsByOp := map[string]int{}
	msgIDsByOp := map[string]map[string]bool{}
	for _, m := range msgs {
		mailsByMsgID[m.MessageID]++
		if op := opFromMessageID(m.MessageID); op != "" {
			if known, ok := opOfKey[op]; ok {
				op = known
			}
			mailsByOp[op]++
			if msgIDsByOp[op] == nil {
				msgIDsByOp[op] = map[string]bool{}
			}
			msgIDsByOp[op][m.MessageID] = true
		}
	}

	rep := &Report{}
	bad := map[*Result]bool{}
	violate := func(r *Result, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if r != nil {
			msg = fmt.Sprintf("op %d %s key=%s operation_id=%s: %s", r.Index, r.Tool, r.Key, r.OperationID, msg)
			bad[r] = true
		}
		rep.Violations = append(rep.Violations, msg)
	}
	// Notes of one kind are listed up to noteCap times, then counted.
	const noteCap = 5
	noteCounts := map[string]int{}
	var noteKinds []string
	capped := func(kind string) bool {
		if noteCounts[kind] == 0 {
			noteKinds = append(noteKinds, kind)
		}
		noteCounts[kind]++
		return noteCounts[kind] > noteCap
	}
	note := func(r *Result, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if r != nil {
			msg = fmt.Sprintf("op %d %s key=%s operation_id=%s: %s", r.Index, r.Tool, r.Key, r.OperationID, msg)
		}
		rep.Notes = append(rep.Notes, msg)
	}

	byTool := map[string]int{}
	succeeded := map[string]int{}
	failedCodes := map[string]int{}
	known := map[string]bool{}
	lost, failed := 0, 0
	var slow []*Result
	dupCallers := 0
	answers := map[string]int{}
	var requests, replays, maxAttempts int
	var maxLatency time.Duration
	refundMin, refundMax := -1, 0
	ledgerMax, seatMax := 0, 0
	mailOpsMax := 0

	for _, r := range results {
		byTool[r.Tool]++
		requests += r.Requests
		replays += r.Replays
		maxLatency = max(maxLatency, r.Latency)
		maxAttempts = max(maxAttempts, r.Attempts)
		for k, v := range r.Answers {
			answers[k] += v
		}
		if r.Dups > 1 {
			dupCallers++
		}
		if info.SlowAfter > 0 && r.Latency > info.SlowAfter {
			slow = append(slow, r)
		}
		for _, a := range r.Anomalies {
			violate(r, "anomaly: %s", a)
		}
		c, hasClaim := claims[[2]string{r.Tool, r.Key}]
		switch {
		case r.OperationID == "" && !hasClaim:
			lost++
			violate(r, "lost: never accepted and no claim exists (%d requests, answers %v)", r.Requests, r.Answers)
			continue
		case !hasClaim:
			lost++
			violate(r, "lost: the api named the operation but no claim exists")
			continue
		}
		if r.OperationID == "" {
			r.OperationID = c.opID
		}
		known[c.opID] = true
		if c.opID != r.OperationID {
			violate(r, "the claim's operation_id is %s", c.opID)
		}
		if c.status != "succeeded" && c.status != "failed" {
			lost++
			violate(r, "lost: the claim is still %s after the drain (attempts %d)", c.status, c.attempts)
			continue
		}
		if r.Status == "" {
			lost++
			violate(r, "lost: no caller learned a terminal status (claim: %s %s)", c.status, c.code)
			continue
		}
		if c.status != r.Status || c.code != r.ErrorCode {
			violate(r, "callers were told %s/%s, the claim says %s/%s", r.Status, r.ErrorCode, c.status, c.code)
		}
		ok := c.status == "succeeded"
		if ok {
			succeeded[r.Tool]++
		} else {
			failed++
			failedCodes[r.Tool+": "+c.code]++
			if c.code == "outcome_unknown" {
				note(r, "failed with outcome_unknown after %d attempts", c.attempts)
				bad[r] = true
			} else {
				violate(r, "failed with unexpected code %q after %d attempts", c.code, c.attempts)
			}
		}
		id := c.opID
		switch r.Tool {
		case ToolRefund:
			n := stripeByOp[id]
			if ok {
				if refundMin < 0 || n < refundMin {
					refundMin = n
				}
				refundMax = max(refundMax, n)
			}
			switch {
			case ok && n > 1:
				violate(r, "DUPLICATE REFUND: %d refunds at the test Stripe carry this operation id", n)
			case ok && n == 0:
				violate(r, "succeeded, but no refund at the test Stripe carries this operation id")
			case !ok && n > 0 && c.code != "outcome_unknown":
				violate(r, "failed with %s, but %d refund(s) at the test Stripe carry this operation id", c.code, n)
			case !ok && n > 0:
				note(r, "failed with outcome_unknown and %d refund(s) at the test Stripe", n)
			}
			want := 0
			if ok {
				want = 1
			}
			if dbRefunds[id] != want {
				violate(r, "%d refunds rows in the database, want %d", dbRefunds[id], want)
			}
			order, _ := r.Args["order_id"].(string)
			amount := toInt(r.Args["amount_cents"])
			if wantCents := map[bool]int{true: amount, false: 0}[ok]; refunded[order] != wantCents {
				violate(r, "order %s has refunded_cents %d, want %d", order, refunded[order], wantCents)
			}
		case ToolCredit:
			n := ledger[id]
			ledgerMax = max(ledgerMax, n)
			switch {
			case n > 1:
				violate(r, "DUPLICATE LEDGER ROWS: %d ledger_entries rows for this operation", n)
			case ok && n == 0:
				violate(r, "succeeded, but no ledger_entries row")
			case !ok && n > 0:
				violate(r, "failed with %s, but %d ledger_entries row(s)", c.code, n)
			}
		case ToolSeat:
			n, sc := seatResets[id], seatCounts[r.Seat]
			seatMax = max(seatMax, n, sc)
			switch {
			case n > 1 || sc > 1:
				violate(r, "DUPLICATE SEAT CHANGE: %d seat_resets rows, seat %s reset_count %d", n, r.Seat, sc)
			case ok && (n != 1 || sc != 1):
				violate(r, "succeeded, but %d seat_resets rows and seat %s reset_count %d", n, r.Seat, sc)
			case !ok && (n > 0 || sc > 0):
				violate(r, "failed with %s, but %d seat_resets rows and seat %s reset_count %d", c.code, n, r.Seat, sc)
			}
		case ToolMail:
			n := mailsByOp[id]
			mailOpsMax = max(mailOpsMax, n)
			switch {
			case ok && n == 0:
				violate(r, "succeeded, but no mail with its Message-ID reached Mailpit")
			case n > 1 && !capped("operations with more than one mail"):
				note(r, "%d mails at Mailpit (SMTP cannot deduplicate; Message-IDs %v)", n, keys(msgIDsByOp[id]))
			}
			if len(msgIDsByOp[id]) > 1 {
				violate(r, "mails with %d different Message-IDs: %v", len(msgIDsByOp[id]), keys(msgIDsByOp[id]))
			}
		}
	}

	// Effects that belong to no planned operation.
	for id, n := range stripeByOp {
		if !known[id] {
			violate(nil, "%d refund(s) at the test Stripe carry operation id %s, which no planned operation has", n, id)
		}
	}
	for ch, n := range stats.RefundsByCharge {
		if n > 1 {
			violate(nil, "DUPLICATE REFUND: charge %s has %d refunds (each order is refunded once)", ch, n)
		}
	}
	for id, n := range ledger {
		if !known[id] {
			violate(nil, "%d ledger_entries row(s) for operation id %s, which no planned operation has", n, id)
		}
	}
	for id, n := range seatResets {
		if !known[id] {
			violate(nil, "%d seat_resets row(s) for operation id %s, which no planned operation has", n, id)
		}
	}
	nonTerminal := 0
	for k, c := range claims {
		if c.status != "succeeded" && c.status != "failed" {
			nonTerminal++
			if !known[c.opID] {
				violate(nil, "claim %s/%s (%s) is still %s", k[0], k[1], c.opID, c.status)
			}
		}
	}
	mailMax, mailDupIDs, mailExtra := 0, 0, 0
	for _, n := range mailsByMsgID {
		mailMax = max(mailMax, n)
		if n > 1 {
			mailDupIDs++
			mailExtra += n - 1
		}
	}
	if len(pendingJobs) > 0 {
		note(nil, "River jobs of the four tools not finalized after the drain: %v", pendingJobs)
	}
	for _, e := range info.WorkerExits {
		note(nil, "%s", e)
	}
	if info.PGRestartErr != "" {
		violate(nil, "Postgres restart failed: %s", info.PGRestartErr)
	}
	for _, e := range info.APIExits {
		violate(nil, "an api replica died by itself: %s", e)
	}
	// Every answer a proxy held was "accepted" and never delivered: the
	// client's retries of that key, on another replica, must replay it or
	// report it in flight. Another "accepted" would be a second claim.
	byKey := map[[2]string]*Result{}
	for _, r := range results {
		byKey[[2]string{r.Tool, r.Key}] = r
	}
	heldReplayed, heldAcceptedAgain := 0, 0
	for _, h := range info.HeldAnswers {
		r := byKey[[2]string{h.Tool, h.Key}]
		switch {
		case r == nil:
			violate(nil, "a proxy held an accepted answer for %s key %s, which no planned operation has", h.Tool, h.Key)
		case r.Accepted > 0:
			heldAcceptedAgain++
			violate(r, "its accepted answer was held and dropped with replica api-%d, yet a caller was told \"accepted\" %d time(s) again", h.Replica, r.Accepted)
		case r.OperationID != "" && r.OperationID != h.OperationID:
			violate(r, "its dropped answer named operation %s, the callers saw %s", h.OperationID, r.OperationID)
		case r.AfterLoss["replayed"]+r.AfterLoss["in_flight"] > 0:
			heldReplayed++
		}
	}
	if info.APIKillEvery > 0 && info.APIs > 1 && len(info.HeldAnswers) == 0 {
		violate(nil, "no api replica was killed between a claim's commit and its answer: the run did not test that window")
	}
	afterLoss := map[string]int{}
	lostAnswers := 0
	for _, r := range results {
		lostAnswers += r.Lost
		for k, v := range r.AfterLoss {
			afterLoss[k] += v
		}
	}
	if info.DrainMissed {
		violate(nil, "drain deadline missed: operations were not all terminal %s after the load ended", info.DrainDeadline)
	}
	sort.Slice(slow, func(i, j int) bool { return slow[i].Latency > slow[j].Latency })
	for i, r := range slow {
		if !capped(fmt.Sprintf("operations slower than %s", info.SlowAfter)) {
			note(r, "took %s to become terminal (attempts %d)", r.Latency.Round(time.Millisecond), r.Attempts)
		}
		if i < 3 {
			bad[r] = true
		}
	}
	for _, kind := range noteKinds {
		if n := noteCounts[kind]; n > noteCap {
			note(nil, "%d %s in all (%d listed)", n, kind, noteCap)
		}
	}
	recoveryText := func(kind string) string {
		rs := recoveries[kind]
		if len(rs) == 0 {
			return "none"
		}
		var ds []time.Duration
		reattempted := 0
		for _, rc := range rs {
			ds = append(ds, rc.d)
			if rc.attempts > 1 {
				reattempted++
			}
		}
		slices.Sort(ds)
		return fmt.Sprintf("%d kills: median %s, max %s from the kill to the terminal status; %d of them re-ran the effect (attempts > 1)",
			len(rs), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), reattempted)
	}
	reclaimMax := 0
	for _, n := range reclaimsPerOp {
		reclaimMax = max(reclaimMax, n)
	}
	if refundMin < 0 {
		refundMin = 0
	}

	var toolParts, okParts []string
	totalOK := 0
	for _, t := range Tools {
		toolParts = append(toolParts, fmt.Sprintf("%s %d", t, byTool[t]))
		okParts = append(okParts, fmt.Sprintf("%d", succeeded[t]))
		totalOK += succeeded[t]
	}
	failedText := "0"
	if len(failedCodes) > 0 {
		failedText = fmt.Sprintf("%d (%s)", failed, fmtCounts(failedCodes))
	}
	rep.Rows = [][2]string{
		{"seed · load · api replicas · workers", fmt.Sprintf("%d · %s · %d · %d", info.Seed, info.Duration, info.APIs, info.Workers)},
		{"operations (by tool)", fmt.Sprintf("%d (%s)", len(results), strings.Join(toolParts, ", "))},
		{"operations succeeded / failed", fmt.Sprintf("%d (%s) / %s", totalOK, strings.Join(okParts, "+"), failedText)},
		{"ops called by 2-3 parallel duplicate callers", fmt.Sprint(dupCallers)},
		{"HTTP requests (answers)", fmt.Sprintf("%d (%s); replays seen %d", requests, fmtCounts(answers), replays)},
		{"worker kills (SIGKILL)", fmt.Sprintf("%d: %d random, %d holding a refund applied at Stripe, %d holding a mail stored by Mailpit (every ~%s; %d worker starts, %d exited by themselves)",
			info.Kills, info.KillsByKind["random"], info.KillsByKind["refund"], info.KillsByKind["mail"], info.KillEvery, info.WorkerStarts, len(info.WorkerExits))},
		{"api replicas (each behind a proxy; clients move to the next one on a failed connection or a 5xx)", fmt.Sprint(info.APIs)},
		{"api kills (SIGKILL)", fmt.Sprintf("%d: %d between the claim's commit and its answer (a proxy held the answer `accepted`), %d random (every ~%s; %d api starts)",
			info.APIKills, info.APIKillsByKind["held"], info.APIKillsByKind["random"], info.APIKillEvery, info.APIStarts)},
		{"answers lost by killed replicas", fmt.Sprintf("%d held after the commit and dropped, %d cut mid-request; %d requests refused while a replica was down (clients saw %d failed calls in all)",
			info.Proxy.Held, info.Proxy.Cut, info.Proxy.Refused, lostAnswers)},
		{"retries after a lost answer (next answer on another replica)", fmt.Sprintf("%s; of the %d keys whose answer was held and dropped: %d retried to a replay or the in-flight handle, %d told \"accepted\" again (must be 0)",
			orNone(fmtCounts(afterLoss)), len(info.HeldAnswers), heldReplayed, heldAcceptedAgain)},
		{"Postgres restarts", fmt.Sprintf("%d (pg_ctl restart -m fast took %s)", info.PGRestarts, info.PGOutage.Round(time.Millisecond))},
		{"reclaims (audit `reclaimed`)", fmt.Sprintf("%d (max %d per operation; max attempts %d)", reclaims, reclaimMax, maxAttempts)},
		{"recovery after a kill holding an applied refund", recoveryText("refund")},
		{"recovery after a kill holding a stored mail", recoveryText("mail")},
		{"longest gap between River's reaper jobs (every worker also runs a pass each interval: jobs.KeepReaping)", reaperGap.Round(time.Millisecond).String()},
		{"test Stripe faults", fmt.Sprintf("%d refund creates: %d injected 500s, %d responses dropped, %d replays, %d key_in_use", stats.RefundCreates, stats.InjectedErrors, stats.Dropped, stats.Replays, stats.KeyInUse)},
		{"refunds per operation at the test Stripe (min/max)", fmt.Sprintf("%d / %d (over %d succeeded refunds; %d refunds created)", refundMin, refundMax, succeeded[ToolRefund], stats.RefundsCreated)},
		{"ledger rows per operation (max)", fmt.Sprint(ledgerMax)},
		{"seat changes per operation (max)", fmt.Sprint(seatMax)},
		{"mails per Message-ID (max, duplicates)", fmt.Sprintf("%d, %d Message-IDs duplicated (%d extra mails; %d mails in all)", mailMax, mailDupIDs, mailExtra, len(msgs))},
		{"operations lost", fmt.Sprintf("%d (claims not terminal: %d)", lost, nonTerminal)},
		{"time to drain", fmt.Sprintf("%s (deadline %s; slowest operation %s)", info.Drain.Round(time.Millisecond), info.DrainDeadline, maxLatency.Round(time.Millisecond))},
		{"wall time", info.Elapsed.Round(time.Second).String()},
	}

	if src.Webhooks {
		row, err := checkProvider(ctx, conn, stats, violate)
		if err != nil {
			return nil, err
		}
		rep.Rows = append(rep.Rows[:len(rep.Rows)-1:len(rep.Rows)-1], row, rep.Rows[len(rep.Rows)-1])
	}

	// Audit trails of the operations that need a look.
	var flagged []*Result
	for r := range bad {
		flagged = append(flagged, r)
	}
	sort.Slice(flagged, func(i, j int) bool { return flagged[i].Index < flagged[j].Index })
	if len(flagged) > 12 {
		flagged = flagged[:12]
	}
	for _, r := range flagged {
		rep.Trails = append(rep.Trails, trail(ctx, conn, r, stripeByOp[r.OperationID], ledger[r.OperationID], mailsByOp[r.OperationID]))
	}
	return rep, nil
}

// Markdown renders the report.
func (rep *Report) Markdown(w io.Writer) {
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "| --- | --- |")
	for _, row := range rep.Rows {
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}
	verdict := "PASS: no duplicate refund, ledger row or seat change; nothing lost"
	if len(rep.Violations) > 0 {
		verdict = fmt.Sprintf("FAIL: %d violation(s)", len(rep.Violations))
	}
	fmt.Fprintf(w, "| **verdict** | **%s** |\n", verdict)
	if len(rep.Violations) > 0 {
		fmt.Fprintln(w, "\nViolations:")
		for _, v := range rep.Violations {
			fmt.Fprintln(w, "- "+v)
		}
	}
	if len(rep.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes (not failures):")
		for _, v := range rep.Notes {
			fmt.Fprintln(w, "- "+v)
		}
	}
	for _, t := range rep.Trails {
		fmt.Fprintln(w)
		fmt.Fprint(w, t)
	}
}

// trail formats an operation's audit rows and counts.
func trail(ctx context.Context, conn *pgx.Conn, r *Result, stripeN, ledgerN, mailN int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Audit trail of op %d (%s, key %s, operation_id %s; client saw %s/%s, attempts %d, %d requests %v; "+
		"refunds at Stripe %d, ledger rows %d, mails %d):\n",
		r.Index, r.Tool, r.Key, r.OperationID, r.Status, r.ErrorCode, r.Attempts, r.Requests, r.Answers, stripeN, ledgerN, mailN)
	rows, err := conn.Query(ctx, `SELECT created_at, decision, coalesce(job_id, 0), reason, coalesce(result::text, '')
		FROM audit_events WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3 ORDER BY id`, Tenant, r.Tool, r.Key)
	if err != nil {
		fmt.Fprintf(&b, "  (audit query failed: %v)\n", err)
		return b.String()
	}
	defer rows.Close()
	fmt.Fprintln(&b, "```")
	// Runs of in_flight and replayed rows (callers polling by re-posting)
	// are folded into one line.
	var runDecision string
	var runN int
	var runFirst, runLast time.Time
	flush := func() {
		if runN > 0 {
			fmt.Fprintf(&b, "%s %-9s ×%d until %s\n", runFirst.Format("15:04:05.000"), runDecision, runN, runLast.Format("15:04:05.000"))
		}
		runN = 0
	}
	for rows.Next() {
		var at time.Time
		var decision, reason, result string
		var job int64
		if err := rows.Scan(&at, &decision, &job, &reason, &result); err != nil {
			fmt.Fprintf(&b, "(scan: %v)\n", err)
			break
		}
		if decision == "in_flight" || decision == "replayed" {
			if runN > 0 && decision != runDecision {
				flush()
			}
			if runN == 0 {
				runDecision, runFirst = decision, at
			}
			runN++
			runLast = at
			continue
		}
		flush()
		fmt.Fprintf(&b, "%s %-9s job=%-6d %s %s\n", at.Format("15:04:05.000"), decision, job, truncate(reason, 160), truncate(result, 160))
	}
	flush()
	fmt.Fprintln(&b, "```")
	return b.String()
}

// opFromMessageID extracts what a downstream key names from
// "idg_<intent key or operation id>_<gen>@domain" (or the bare key).
func opFromMessageID(id string) string {
	local, _, _ := strings.Cut(strings.Trim(id, "<>"), "@")
	if !strings.HasPrefix(local, "idg_") {
		return ""
	}
	local = strings.TrimPrefix(local, "idg_")
	i := strings.LastIndex(local, "_")
	if i < 0 {
		return ""
	}
	return local[:i]
}

func stripeStats(ctx context.Context, base string) (*stripetest.Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/_stats", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("test Stripe /_stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("test Stripe /_stats: %s", resp.Status)
	}
	var s stripetest.Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("test Stripe /_stats: %w", err)
	}
	return &s, nil
}

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	var err error
	for range 20 {
		var conn *pgx.Conn
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err = pgx.Connect(cctx, url)
		cancel()
		if err == nil {
			return conn, nil
		}
		sleep(ctx, 500*time.Millisecond)
	}
	return nil, fmt.Errorf("connecting to the database: %w", err)
}

func toInt(v any) int {
	switch x := v.(type) {
	case int64:
		return int(x)
	case float64:
		return int(x)
	case int:
		return x
	}
	return -1
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func fmtCounts(m map[string]int) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// checkProvider counts the provider's side against the test Stripe's
// webhooks: every event the api acknowledged is recorded once (the event
// id is provider_events' key), no refund idemgate made is drift (every
// refund of the run is idemgate's). It returns the report's row.
func checkProvider(ctx context.Context, conn *pgx.Conn, stats *stripetest.Stats, violate func(*Result, string, ...any)) ([2]string, error) {
	wh := stats.Webhooks
	var recorded, fromPoll int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE source = 'webhook'), count(*) FILTER (WHERE source = 'poll') FROM provider_events`).
		Scan(&recorded, &fromPoll); err != nil {
		return [2]string{}, err
	}
	ids := make([]string, 0, len(wh.DeliveredByID))
	for id := range wh.DeliveredByID {
		ids = append(ids, id)
	}
	var acked int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM provider_events WHERE event_id = ANY($1)`, ids).Scan(&acked); err != nil {
		return [2]string{}, err
	}
	if acked != len(ids) {
		violate(nil, "provider's side: %d webhook events acknowledged to the test Stripe, %d of them recorded", len(ids), acked)
	}
	if recorded > wh.Emitted {
		violate(nil, "provider's side: %d webhook events recorded, the test Stripe emitted %d", recorded, wh.Emitted)
	}
	drift := map[string]int{}
	rows, err := conn.Query(ctx, `SELECT kind || ' ' || refund_id || ' (operation ' || operation_id || '): ' || detail FROM refund_drift ORDER BY id`)
	if err != nil {
		return [2]string{}, err
	}
	var drifts []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			rows.Close()
			return [2]string{}, err
		}
		drifts = append(drifts, d)
		drift[strings.SplitN(d, " ", 2)[0]]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return [2]string{}, err
	}
	for _, d := range drifts {
		violate(nil, "false drift: every refund of the run is idemgate's: %s", d)
	}
	var refunds, settled int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM provider_refunds`).Scan(&refunds); err != nil {
		return [2]string{}, err
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE reason LIKE 'settled_by_provider:%'`).Scan(&settled); err != nil {
		return [2]string{}, err
	}
	return [2]string{"Stripe webhooks (signed; duplicated, reordered, dropped)", fmt.Sprintf(
		"%d events emitted: %d deliveries acknowledged (%d distinct), %d duplicated, %d reordered, %d dropped, %d failed attempts, %d given up; "+
			"%d events recorded once each (+%d from the list of refunds), %d refunds recorded, %d operations settled by Stripe's report, drift %d (must be 0)",
		wh.Emitted, wh.Delivered, len(wh.DeliveredByID), wh.Duplicated, wh.Reordered, len(wh.DroppedIDs), wh.FailedAttempts, len(wh.GaveUpIDs),
		recorded, fromPoll, refunds, settled, len(drifts))}, nil
}
