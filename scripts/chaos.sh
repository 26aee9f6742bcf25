#!/usr/bin/env bash
# scripts/chaos.sh: proof that the retry storm and the kill -9 change nothing,
# by counting effects where they land.
#
#   scripts/chaos.sh --short     about a minute of load, for CI (scripts/test.sh
#                                step g): 150 operations, a worker kill every
#                                ~4s, an api replica kill every ~8s
#   scripts/chaos.sh             the long run: --duration 10m, a worker kill
#                                every ~2.5s (over 200 kills), an api kill
#                                every ~5s, 1500 operations
#   scripts/chaos.sh --short --pgbouncer
#                                the same with the api replicas and the
#                                workers connecting through PgBouncer in
#                                transaction pooling mode (installed with
#                                apt-get when missing, started on a free port
#                                in front of the run's own Postgres)
#
# Flags (after the mode; each overrides its default):
#   --duration D       load duration (Go syntax: 90s, 10m)
#   --seed N           seed of the workload, the kill schedule and the test
#                      Stripe's faults (default 1; a run is repeatable up to
#                      timing)
#   --ops N            operations (default: 150 per minute of load)
#   --apis N           api replicas (default 2), each behind a proxy of the
#                      driver's; clients spread their calls over them
#   --workers M        worker processes (default 3)
#   --kill-every D     mean interval between worker kills (±25%)
#   --api-kill-every D mean interval between api replica kills (±25%; 0: none)
#   --pgbouncer        api and workers connect through PgBouncer
#                      (pool_mode=transaction, IDEMGATE_DB_POOLER=transaction:
#                      River polls, waiting calls poll, no prepared statements);
#                      migrations, seeding and the counting connect directly
#   --drain-timeout D  deadline for every operation to be terminal after the
#                      load ended (default 120s)
#   --lease D          IDEMGATE_INFLIGHT_TIMEOUT of the workers (default 3s)
#
# What it does, all on loopback and in a temp dir removed on exit:
#   1. starts its own Postgres cluster (initdb + pg_ctl on a free port, as
#      user postgres when run as root), builds cmd/api, cmd/worker,
#      cmd/idemctl, the test Stripe and the driver (without -race), migrates,
#      and seeds what the planned operations need (chaosdriver plan);
#   2. starts the test Stripe (-drop-rate 0.10 -error-rate 0.05: refunds
#      applied whose response is lost, 500s before anything is applied) and a
#      private Mailpit (the binary scripts/services.sh installs);
#   3. runs internal/chaos/cmd/chaosdriver, which starts the api replicas
#      (IDEMGATE_WAIT=1s), each on a port of its own behind a reverse proxy
#      of the driver's, and the workers (short lease, reaper every 1s), fires
#      the operations of all four tools over the REST twin like agents
#      behind a load balancer do (same key on every retry, 2-3 parallel
#      duplicates for a third of them, polling on 202/409, retrying on 429,
#      5xx and network errors, moving to the next replica when a connection
#      fails), kills a worker with SIGKILL every few seconds and starts a
#      new one, kills api replicas the same way (every other kill waits
#      until a proxy holds an answer "accepted", so the claim is committed,
#      kills the replica that gave it and only then cuts the client's
#      connection: the client must get a replay or the in-flight handle from
#      another replica, never a second "accepted"), restarts Postgres once
#      (pg_ctl restart -m fast) mid-load, waits for every operation to be
#      terminal, and then
#      counts: refunds per operation at the test Stripe (by metadata
#      idemgate_operation_id), ledger rows and seat changes per operation,
#      mails per Message-ID at Mailpit, claims never terminal, and the
#      provider's side: the test Stripe sends signed webhooks to api-0
#      (IDEMGATE_STRIPE_WEBHOOK_SECRETS; 10% duplicated, 10% reordered, 5%
#      dropped, retried while api-0 is down), every acknowledged event must
#      be recorded once and no refund may show as drift (all are idemgate's).
#      Half of the kills pick a worker at random; the others wait until an
#      effect was applied but not yet answered (a refund held by the test
#      Stripe's /_hold, a mail stored by Mailpit whose 250 the driver's SMTP
#      proxy holds) and kill exactly the worker that made that call, so the
#      reclaim really repeats the call (the duplicate mails this causes are
#      the SMTP window the table measures).
#
# It prints a Markdown table and exits non-zero on a duplicate refund, ledger
# row or seat change, a refund drift record, an acknowledged webhook event
# not recorded, a lost operation, an unexpected failure code or a
# missed drain deadline. Duplicate mails are reported, not failed: SMTP cannot
# deduplicate (docs/design.md, "Two kinds of effect"). On failure the tails of every log
# are printed; CHAOS_KEEP=1 keeps the temp dir (logs, results.json).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
started=$SECONDS

log() { printf 'chaos.sh: %s\n' "$*" >&2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

mode=long
duration="" seed=1 ops=0 kill_every="" api_kill_every="" drain=120s lease=3s apis=2 workers=3 pgbouncer=0
need() { [[ $# -ge 2 && -n $2 ]] || { log "$1 needs a value"; exit 2; }; }
while (($#)); do
	case $1 in
	--short) mode=short ;;
	--long) mode=long ;;
	--duration) need "$@"; duration=$2; shift ;;
	--duration=*) duration=${1#*=} ;;
	--seed) need "$@"; seed=$2; shift ;;
	--seed=*) seed=${1#*=} ;;
	--ops) need "$@"; ops=$2; shift ;;
	--ops=*) ops=${1#*=} ;;
	--apis) need "$@"; apis=$2; shift ;;
	--apis=*) apis=${1#*=} ;;
	--workers) need "$@"; workers=$2; shift ;;
	--workers=*) workers=${1#*=} ;;
	--api-kill-every) need "$@"; api_kill_every=$2; shift ;;
	--api-kill-every=*) api_kill_every=${1#*=} ;;
	--pgbouncer) pgbouncer=1 ;;
	--kill-every) need "$@"; kill_every=$2; shift ;;
	--kill-every=*) kill_every=${1#*=} ;;
	--drain-timeout) need "$@"; drain=$2; shift ;;
	--drain-timeout=*) drain=${1#*=} ;;
	--lease) need "$@"; lease=$2; shift ;;
	--lease=*) lease=${1#*=} ;;
	-h | --help) usage; exit 0 ;;
	*) log "unknown argument '$1' (see --help)"; exit 2 ;;
	esac
	shift
done
if [[ $mode == short ]]; then
	: "${duration:=60s}" "${kill_every:=4s}" "${api_kill_every:=8s}"
else
	: "${duration:=10m}" "${kill_every:=2500ms}" "${api_kill_every:=5s}"
fi
[[ $apis =~ ^[1-9][0-9]*$ ]] || { log "--apis must be a positive integer, got '$apis'"; exit 2; }
[[ $workers =~ ^[1-9][0-9]*$ ]] || { log "--workers must be a positive integer, got '$workers'"; exit 2; }
[[ $seed =~ ^[1-9][0-9]*$ ]] || { log "--seed must be a positive integer, got '$seed'"; exit 2; }
[[ $ops =~ ^[0-9]+$ ]] || { log "--ops must be a non-negative integer, got '$ops'"; exit 2; }

tmp=""          # everything of this run: binaries, logs, the cluster
source scripts/pgcluster.sh # pg_bin, pg_as, pg_data, pg_port, pg_url
source scripts/pgbouncer.sh # pgbouncer_start, pgb_port (--pgbouncer)
pids=()         # processes this script started (test Stripe, Mailpit)
driver_pid=""   # chaosdriver, which owns the api replicas and the workers
step=setup

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
alive() { kill -0 "$1" 2>/dev/null; }

# stop_pid PID: SIGTERM, then SIGKILL after 5s, and reap.
stop_pid() {
	local pid=$1 i
	# A process that already exited (Mailpit on a port taken meanwhile) is
	# reaped whatever its status: under set -e a failing wait would end
	# the script, and the caller's retry with it.
	alive "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
	kill "$pid" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		alive "$pid" || break
		sleep 0.1
	done
	alive "$pid" && kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || true
	return 0
}

cleanup() {
	local rc=$? pid f i
	set +e
	trap - INT TERM
	if ((rc != 0)) && [[ -n $tmp ]]; then
		log "FAILED at step '$step' (exit $rc); the tails of the logs:"
		for f in "$tmp"/logs/*.log "$tmp"/pg/postgres.log "$tmp"/pgbouncer/pgbouncer.log; do
			[[ -s $f ]] || continue
			printf '\n----- %s (last 25 lines) -----\n' "${f#"$tmp"/}" >&2
			tail -n 25 "$f" | cut -c1-400 >&2
		done
		echo >&2
	fi
	# The driver stops its workers on SIGTERM; any it left behind are in
	# the pid file.
	if [[ -n $driver_pid ]]; then
		kill "$driver_pid" 2>/dev/null
		for ((i = 0; i < 200; i++)); do
			alive "$driver_pid" || break
			sleep 0.1
		done
		stop_pid "$driver_pid"
	fi
	for f in workers api; do
		[[ -n $tmp && -f $tmp/$f.pids ]] || continue
		while read -r pid; do
			[[ -n $pid ]] || continue
			if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "^$tmp/bin/${f%s}"; then
				kill -9 "$pid" 2>/dev/null
			fi
		done <"$tmp/$f.pids"
	done
	for pid in "${pids[@]}"; do
		stop_pid "$pid"
	done
	pgbouncer_stop
	pgcluster_stop immediate
	if [[ -n $tmp ]]; then
		if [[ ${CHAOS_KEEP:-0} == 1 ]]; then
			log "CHAOS_KEEP=1: kept $tmp"
		else
			rm -rf "$tmp"
		fi
	fi
	if ((rc == 0)); then
		log "OK ($mode mode) in $((SECONDS - started))s"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-chaos.XXXXXX")
chmod 755 "$tmp" # the postgres user must reach $tmp/pg
mkdir -p "$tmp/bin" "$tmp/logs" "$tmp/pg"

# ---------------------------------------------------------------------------
# Build (without -race: these are the products under test)
# ---------------------------------------------------------------------------
step=build
log "building cmd/api, cmd/worker, cmd/idemctl, teststripe and chaosdriver into $tmp/bin"
go build -o "$tmp/bin/" ./cmd/api ./cmd/worker ./cmd/idemctl \
	./internal/stripetest/cmd/teststripe ./internal/chaos/cmd/chaosdriver
bin=$tmp/bin

# ---------------------------------------------------------------------------
# Postgres: a throwaway cluster of our own (fsync stays on)
# ---------------------------------------------------------------------------
step=postgres
pgcluster_start "$tmp/pg" "-c max_connections=300" || exit 1
export DATABASE_URL=$pg_url
direct_url=$pg_url
pg_restart_cmd=$(printf '%q ' "${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_data" -l "$tmp/pg/postgres.log" -w -t 60 -m fast restart)
log "Postgres $("$pg_bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$pg_port ($pg_data)"

# ---------------------------------------------------------------------------
# Schema, workload plan and seed data
# ---------------------------------------------------------------------------
step=migrate
"$bin/idemctl" migrate >"$tmp/logs/migrate.log" 2>&1 || { cat "$tmp/logs/migrate.log" >&2; exit 1; }
step=seed
"$bin/chaosdriver" plan -seed "$seed" -duration "$duration" -ops "$ops" -out "$tmp"
"$bin/idemctl" seed --file "$tmp/seed.json" >"$tmp/logs/seed.log" 2>&1 || { cat "$tmp/logs/seed.log" >&2; exit 1; }

# ---------------------------------------------------------------------------
# PgBouncer (--pgbouncer): the api replicas and the workers go through it
# ---------------------------------------------------------------------------
if ((pgbouncer)); then
	step=pgbouncer
	mkdir -p "$tmp/pgbouncer"
	pgbouncer_start "$tmp/pgbouncer" "$pg_port" 40 || exit 1
	export DATABASE_URL=$pgb_url IDEMGATE_DB_POOLER=transaction
fi

# ---------------------------------------------------------------------------
# The test Stripe, Mailpit
# ---------------------------------------------------------------------------
step=teststripe
"$bin/teststripe" -addr 127.0.0.1:0 -drop-rate 0.10 -error-rate 0.05 -seed "$seed" -auto-charge-amount 100000 \
	>"$tmp/teststripe.url" 2>"$tmp/logs/teststripe.log" &
pids+=("$!")
stripe_url=""
for ((i = 0; i < 600; i++)); do
	stripe_url=$(head -n 1 "$tmp/teststripe.url" 2>/dev/null || true)
	[[ -n $stripe_url ]] && break
	alive "${pids[-1]}" || break
	sleep 0.1
done
[[ -n $stripe_url ]] || { log "the test Stripe did not report its address"; exit 1; }

step=mailpit
# shellcheck source=scripts/services.sh
source scripts/services.sh
_svc_install mailpit "$_SVC_MAILPIT_MODULE" "$_SVC_MAILPIT_VERSION"
mailpit_api="" smtp_addr=""
for try in 1 2 3; do
	mp_smtp=$(_svc_free_port)
	mp_http=$(_svc_free_port "$mp_smtp")
	"$root/.tmp/bin/mailpit" --smtp "127.0.0.1:$mp_smtp" --listen "127.0.0.1:$mp_http" \
		--database "$tmp/mailpit.db" --max 0 --smtp-auth-accept-any --smtp-auth-allow-insecure \
		--smtp-disable-rdns --disable-version-check >"$tmp/logs/mailpit.log" 2>&1 &
	mp_pid=$!
	pids+=("$mp_pid")
	for ((i = 0; i < 300; i++)); do
		if port_open 127.0.0.1 "$mp_smtp" && port_open 127.0.0.1 "$mp_http"; then
			mailpit_api="http://127.0.0.1:$mp_http" smtp_addr="127.0.0.1:$mp_smtp"
			break 2
		fi
		alive "$mp_pid" || break
		sleep 0.1
	done
	log "Mailpit did not start on ports $mp_smtp/$mp_http (try $try)"
	stop_pid "$mp_pid"
done
[[ -n $mailpit_api ]] || { log "could not start Mailpit"; exit 1; }

# What the api and the workers read (the workers inherit it from the driver).
export STRIPE_API_KEY=sk_test_chaos
export STRIPE_API_BASE=$stripe_url
export SMTP_ADDR=$smtp_addr
export MAIL_FROM="idemgate chaos <no-reply@chaos.example>"
export IDEMGATE_SECRET=chaos-secret-0123456789abcdef0123456789abcdef
export IDEMGATE_INFLIGHT_TIMEOUT=$lease
export IDEMGATE_REAPER_INTERVAL=1s
export IDEMGATE_WAIT=1s
export IDEMGATE_API_ADDR=127.0.0.1:0
export IDEMGATE_WORKER_ADDR=127.0.0.1:0
export IDEMGATE_LOG_LEVEL=info
# The webhook endpoint's signing secret: the driver has the test Stripe
# send its signed webhooks (some duplicated, reordered, dropped) to api-0.
export IDEMGATE_STRIPE_WEBHOOK_SECRETS=whsec_chaos_0123456789abcdef

log "test Stripe $stripe_url, Mailpit $mailpit_api (SMTP $smtp_addr)"

# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------
step=chaos
through="Postgres directly"
((pgbouncer)) && through="PgBouncer 127.0.0.1:$pgb_port (pool_mode=transaction)"
log "$mode mode: load $duration, seed $seed, $apis api replicas and $workers workers through $through, a worker kill every ~$kill_every, an api kill every ~$api_kill_every, lease $lease, drain deadline $drain"
"$bin/chaosdriver" run \
	-plan "$tmp/plan.json" -seed "$seed" \
	-api-bin "$bin/api" -apis "$apis" -api-kill-every "$api_kill_every" -api-pid-file "$tmp/api.pids" \
	-count-database-url "$direct_url" \
	-stripe "$stripe_url" -mailpit "$mailpit_api" -smtp-upstream "$smtp_addr" \
	-worker-bin "$bin/worker" -workers "$workers" -log-dir "$tmp/logs" -pid-file "$tmp/workers.pids" \
	-kill-every "$kill_every" -pg-restart-cmd "$pg_restart_cmd" \
	-webhook-secret "$IDEMGATE_STRIPE_WEBHOOK_SECRETS" -webhook-duplicate-rate 0.1 -webhook-reorder-rate 0.1 -webhook-drop-rate 0.05 \
	-drain-timeout "$drain" -report "$tmp/results.json" &
driver_pid=$!
wait "$driver_pid" # interruptible: a signal runs cleanup, which stops the driver first
driver_pid=""
step="done"
