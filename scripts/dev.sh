#!/usr/bin/env bash
# scripts/dev.sh: run idemgate on this machine with nothing but Go (and, for
# --postgres, a Postgres install: a server or the initdb/pg_ctl binaries).
#
#   scripts/dev.sh              embedded SQLite (.tmp/dev/idemgate.db): the api
#                               with its worker in one process
#   scripts/dev.sh --postgres   Postgres: a database of its own (idemgate_dev),
#                               the api, two worker processes, River UI
#   scripts/dev.sh --stripe test
#                               (with or without --postgres) the project's
#                               counting test Stripe (internal/stripetest)
#                               instead of stripe-mock: it can decline a
#                               charge and counts the refunds it made
#   scripts/dev.sh --help       this text
#
# It checks that the api's and Mailpit's ports are free, then, one line per
# phase: installs pinned stripe-mock and Mailpit (go install, into .tmp/bin),
# builds idemctl and the api (and the worker), migrates and seeds a demo
# tenant (scripts/demo-seed.json), starts stripe-mock, Mailpit and idemgate,
# and prints the MCP endpoint, the demo token, the operator's Basic
# credentials, River UI, Mailpit, a curl line that makes a refund and an
# idemctl line for the same database. When ready it writes DEV_DIR/env, which
# another shell sources (source .tmp/dev/env) to get IDEMGATE_URL,
# IDEMGATE_TOKEN, IDEMGATE_APPROVER_TOKEN, DATABASE_URL, IDEMGATE_OPS_USER, IDEMGATE_OPS_PASSWORD,
# MAILPIT_API_URL, STRIPE_URL (and TESTSTRIPE_URL under --stripe test) and
# .tmp/bin (idemctl) first on PATH; it is removed when dev.sh stops. The
# README's runnable blocks use these (scripts/readme.sh runs them). The
# tools' and migrations' output goes to .tmp/dev/dev.log (its end is shown
# on failure), the api's to .tmp/dev/api.log, the workers' to
# .tmp/dev/worker-N.log.
#
# Mailpit keeps its ports (SMTP 127.0.0.1:1025, web UI 127.0.0.1:8025) and
# its mailbox (.tmp/dev/mailpit.db) from run to run. Running dev.sh again
# reuses the database, the mailbox, the generated IDEMGATE_SECRET
# (.tmp/dev/secret) and operator password (.tmp/dev/ops-password).
# Ctrl-C stops everything it started.
#
# The test Stripe (--stripe test) holds the demo seed's charges and answers
# Stripe's refund endpoints plus control endpoints under /_, without
# authentication (internal/stripetest's package documentation lists them):
#   curl -X POST $TESTSTRIPE_URL/_charges -d '{"id":"ch_456","amount":12000,"fail":{}}'
#                        every refund on ch_456 is declined (402 card_declined)
#   curl -X POST "$TESTSTRIPE_URL/_clear_charge_error?id=ch_456"
#                        refunds on ch_456 work again
#   curl $TESTSTRIPE_URL/_stats
#                        what it counted: refunds_created, refunds_by_charge,
#                        refunds_by_key (by downstream key), replays, ...
# Its log is DEV_DIR/teststripe.log. It keeps nothing across runs.
#
# --postgres uses DEV_POSTGRES_URL, else the server on 127.0.0.1:5432 as user
# postgres when it answers, else a throwaway cluster (scripts/pgcluster.sh)
# that is removed on exit.
#
# Environment:
#   IDEMGATE_API_ADDR       the api's address (default 127.0.0.1:8080)
#   DEV_MAILPIT_SMTP_ADDR   Mailpit's SMTP address (default 127.0.0.1:1025)
#   DEV_MAILPIT_UI_ADDR     Mailpit's web UI and API (default 127.0.0.1:8025)
#   DEV_DIR                 state and logs (default .tmp/dev)
#   DEV_POSTGRES_URL        --postgres: the server, as the URL of any database
#                           on it (postgres://USER:PASSWORD@HOST:PORT/postgres)
#   DEV_DATABASE            --postgres: the database, created when missing
#                           (default idemgate_dev)
#   DEV_POOL_MAX_CONNS=N    --postgres: pool_max_conns=N in DATABASE_URL, the
#                           most connections each process opens (default 10
#                           per api or worker)
#   DEV_EXIT_AFTER_READY=1  start, print, then stop
#   DEV_SMOKE=1             start, make a refund with the printed curl line,
#                           wait until it succeeded, run the line again (it
#                           must be a replay), run the printed idemctl line,
#                           check Mailpit (and River UI on Postgres), then
#                           stop: what scripts/test.sh runs
# Other IDEMGATE_* settings in the environment reach the api and the workers.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

log() { printf 'dev.sh: %s\n' "$*" >&2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

postgres=0
stripe=mock # mock: stripe-mock; test: internal/stripetest's teststripe
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
	arg=${args[i]}
	case $arg in
	-h | --help)
		usage
		exit 0
		;;
	--postgres) postgres=1 ;;
	--stripe | --stripe=*)
		if [[ $arg == --stripe ]]; then
			i=$((i + 1))
			stripe=${args[i]:-}
		else
			stripe=${arg#--stripe=}
		fi
		if [[ $stripe != mock && $stripe != test ]]; then
			log "--stripe takes mock (stripe-mock, the default) or test (the counting test Stripe), got '$stripe'"
			exit 2
		fi
		;;
	*)
		log "unknown argument '$arg' (scripts/dev.sh --help lists the options)"
		exit 2
		;;
	esac
done

command -v go >/dev/null || { log "Go is required: install Go 1.26 (https://go.dev/dl/)"; exit 1; }
command -v curl >/dev/null || { log "curl is required (apt-get install curl)"; exit 1; }
if ((postgres)) && ! command -v psql >/dev/null; then
	log "--postgres needs psql to create its database: install the Postgres client (apt-get install postgresql-client)"
	exit 1
fi

# ---------------------------------------------------------------------------
# Ports: checked before anything slow.
# ---------------------------------------------------------------------------
api_addr=${IDEMGATE_API_ADDR:-127.0.0.1:8080}
smtp_addr=${DEV_MAILPIT_SMTP_ADDR:-127.0.0.1:1025}
ui_addr=${DEV_MAILPIT_UI_ADDR:-127.0.0.1:8025}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
# connect_host HOST: where to reach a server that listens on HOST.
connect_host() {
	case $1 in
	'' | 0.0.0.0 | '[::]') printf '127.0.0.1\n' ;;
	*) printf '%s\n' "$1" ;;
	esac
}
# check_free WHAT VAR ADDR: ADDR is HOST:PORT and nothing listens there.
check_free() {
	local what=$1 var=$2 addr=$3 host port
	host=${addr%:*} port=${addr##*:}
	if [[ $host == "$addr" || ! $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
		log "$var=$addr is not HOST:PORT with a port from 1 to 65535"
		exit 2
	fi
	if port_open "$(connect_host "$host")" "$port"; then
		log "$addr ($what) is already in use: another dev.sh, or a service of yours?"
		log "stop it, or set $var=127.0.0.1:PORT to use another port"
		exit 1
	fi
}
check_free "the api" IDEMGATE_API_ADDR "$api_addr"
check_free "Mailpit's SMTP" DEV_MAILPIT_SMTP_ADDR "$smtp_addr"
check_free "Mailpit's web UI" DEV_MAILPIT_UI_ADDR "$ui_addr"
if [[ ${api_addr##*:} == "${smtp_addr##*:}" || ${api_addr##*:} == "${ui_addr##*:}" || ${smtp_addr##*:} == "${ui_addr##*:}" ]]; then
	log "the api ($api_addr), Mailpit's SMTP ($smtp_addr) and web UI ($ui_addr) need three different ports"
	exit 2
fi
api_host=$(connect_host "${api_addr%:*}")
base="http://$api_host:${api_addr##*:}"

db_name=${DEV_DATABASE:-idemgate_dev}
if ((postgres)) && ! [[ $db_name =~ ^[a-z_][a-z0-9_]{0,62}$ ]]; then
	log "DEV_DATABASE=$db_name: want a lower-case name of letters, digits and _"
	exit 2
fi

# ---------------------------------------------------------------------------
# State, log, cleanup.
# ---------------------------------------------------------------------------
bin_dir=$root/.tmp/bin
mkdir -p "${DEV_DIR:-$root/.tmp/dev}" "$bin_dir"
dev_dir=$(cd "${DEV_DIR:-$root/.tmp/dev}" && pwd)
logf=$dev_dir/dev.log
printf 'scripts/dev.sh %s, %s\n' "$*" "$(date -u +%FT%TZ)" >"$logf"
rm -f "$dev_dir/env" # a killed run's; written again once ready

# show PATH: PATH relative to the repository when inside it, for messages.
show() { if [[ $1 == "$root/"* ]]; then printf '%s\n' "${1#"$root/"}"; else printf '%s\n' "$1"; fi; }

phase=""         # the phase running, for the failure message
phase_started=0
api_pid=""
worker_pids=()
stripe_pid=""    # the test Stripe under --stripe test
env_file=""      # DEV_DIR/env once written; removed on exit
pg_tmp=""        # throwaway cluster, if one was started

# begin WHAT [HINT]: one progress line per phase; the commands' output goes
# to the log.
begin() {
	phase=$1
	phase_started=$SECONDS
	printf 'dev.sh: %s%s ... ' "$1" "${2:+ $2}" >&2
	printf '\n== %s\n' "$1" >>"$logf"
}
end() {
	printf 'ok (%ss)\n' $((SECONDS - phase_started)) >&2
	phase=""
}
# fail MSG [LOG]: ends the phase with MSG and the end of LOG (default the
# setup log), and exits 1.
fail() {
	local logfile=${2:-$logf}
	[[ -n $phase ]] && printf 'failed\n' >&2
	phase=""
	log "$1"
	log "the end of $(show "$logfile"):"
	tail -n 25 "$logfile" | sed 's/^/  /' >&2
	exit 1
}

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	local rc=$? pid pids=("${worker_pids[@]}")
	set +e
	if [[ -n $phase ]]; then
		if ((rc == 130)); then
			printf 'interrupted\n' >&2
		else
			printf 'failed\n' >&2
			log "failed while $phase; the end of its log, $(show "$logf"):"
			tail -n 25 "$logf" | sed 's/^/  /' >&2
		fi
	fi
	[[ -n $api_pid ]] && pids+=("$api_pid")
	[[ -n $stripe_pid ]] && pids+=("$stripe_pid")
	[[ -n $env_file ]] && rm -f "$env_file"
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null
	done
	declare -F services_stop >/dev/null && services_stop
	if [[ -n $pg_tmp ]]; then
		pgcluster_stop fast
		rm -rf "$pg_tmp"
	fi
	log "stopped"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# dev.sh starts its own stripe-mock and Mailpit, whatever a caller exported.
unset STRIPE_MOCK_URL MAILPIT_SMTP_ADDR MAILPIT_API_URL
source scripts/services.sh
source scripts/pgcluster.sh

# ---------------------------------------------------------------------------
# 1. The database (and, for --postgres, the server): a connection problem
# shows before the slow phases.
# ---------------------------------------------------------------------------
redact() { sed -E 's#(://[^:/@]+):[^@]*@#\1:xxxxx@#' <<<"$1"; }
# db_url SERVER_URL NAME: SERVER_URL with its database replaced by NAME.
db_url() {
	local url=$1 name=$2 query="" head rest
	[[ $url == *\?* ]] && query="?${url#*\?}"
	head=${url%%\?*}
	rest=${head#*://}
	printf '%s://%s/%s%s\n' "${head%%://*}" "${rest%%/*}" "$name" "$query"
}

if ((postgres)); then
	default_server="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	if [[ -n ${DEV_POSTGRES_URL:-} ]]; then
		server_url=$DEV_POSTGRES_URL
		server_from="DEV_POSTGRES_URL"
	elif { command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432; } ||
		{ ! command -v pg_isready >/dev/null && port_open 127.0.0.1 5432; }; then
		server_url=$default_server
		server_from="the server on 127.0.0.1:5432"
	else
		begin "starting a throwaway Postgres cluster (nothing answers on 127.0.0.1:5432)"
		pg_tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-dev-pg.XXXXXX")
		pgcluster_start "$pg_tmp" "" >>"$logf" 2>&1 || fail "could not start a throwaway cluster: install Postgres (apt-get install postgresql) or set DEV_POSTGRES_URL"
		server_url=$pg_url
		server_from="a throwaway cluster in $pg_tmp, removed on exit"
		end
	fi
	begin "creating database $db_name (unless it exists) on $(redact "$server_url")"
	psql "$server_url" -XAtq -v ON_ERROR_STOP=1 -c 'SELECT 1' >>"$logf" 2>&1 ||
		fail "cannot connect to $(redact "$server_url") ($server_from): set DEV_POSTGRES_URL=postgres://USER:PASSWORD@HOST:PORT/postgres"
	if [[ -z $(psql "$server_url" -XAtq -v ON_ERROR_STOP=1 -c "SELECT 1 FROM pg_database WHERE datname = '$db_name'" 2>>"$logf") ]]; then
		psql "$server_url" -XAtq -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$db_name\"" >>"$logf" 2>&1
	fi
	end
	export DATABASE_URL
	DATABASE_URL=$(db_url "$server_url" "$db_name")
	if [[ -n ${DEV_POOL_MAX_CONNS:-} ]]; then
		[[ $DEV_POOL_MAX_CONNS =~ ^[1-9][0-9]*$ ]] || { log "DEV_POOL_MAX_CONNS=$DEV_POOL_MAX_CONNS: want a positive number"; exit 2; }
		[[ $DATABASE_URL == *\?* ]] && DATABASE_URL+="&" || DATABASE_URL+="?"
		DATABASE_URL+="pool_max_conns=$DEV_POOL_MAX_CONNS"
	fi
	where="Postgres, database $db_name ($server_from); two workers"
else
	export DATABASE_URL="sqlite:$dev_dir/idemgate.db"
	where="embedded SQLite ($(show "$dev_dir/idemgate.db")); the worker runs in the api process"
fi

# ---------------------------------------------------------------------------
# 2. Tools.
# ---------------------------------------------------------------------------
hint=""
[[ -x $bin_dir/stripe-mock && -x $bin_dir/mailpit ]] || hint="(first run: go install downloads and builds them, a few minutes)"
begin "installing stripe-mock and Mailpit into .tmp/bin" "$hint"
services_install >>"$logf" 2>&1
end

# ---------------------------------------------------------------------------
# 3. Build.
# ---------------------------------------------------------------------------
what="idemctl and the api"
((postgres)) && what="idemctl, the api and the worker"
[[ $stripe == test ]] && what="${what/ and /, } and the test Stripe"
hint=""
[[ -x $bin_dir/idemgate-api ]] || hint="(first run: downloads the modules, a few minutes)"
begin "building $what" "$hint"
go build -o "$bin_dir/idemctl" ./cmd/idemctl >>"$logf" 2>&1
go build -o "$bin_dir/idemgate-api" ./cmd/api >>"$logf" 2>&1
if ((postgres)); then
	go build -o "$bin_dir/idemgate-worker" ./cmd/worker >>"$logf" 2>&1
fi
if [[ $stripe == test ]]; then
	go build -o "$bin_dir/teststripe" ./internal/stripetest/cmd/teststripe >>"$logf" 2>&1
fi
end

# ---------------------------------------------------------------------------
# Secrets, generated once and kept beside the database.
# ---------------------------------------------------------------------------
# keep_random FILE BYTES: FILE holds BYTES random bytes in hex, made once.
keep_random() {
	if [[ ! -s $1 ]]; then
		(umask 077 && od -An -N"$2" -tx1 /dev/urandom | tr -d ' \n' >"$1")
	fi
	cat "$1"
}
ops_user=operator
ops_password=$(keep_random "$dev_dir/ops-password" 16)
export IDEMGATE_SECRET IDEMGATE_OPS_USER=$ops_user IDEMGATE_OPS_PASSWORD=$ops_password
IDEMGATE_SECRET=$(keep_random "$dev_dir/secret" 32)
export IDEMGATE_API_ADDR=$api_addr
token=$(sed -n 's/.*"token": *"\([^"]*\)".*/\1/p' scripts/demo-seed.json | head -n 1)
# fin-lead, a person of acme who may approve (approvals:decide).
approver_token=$(sed -n 's/.*"token": *"\(idg_demo_acme_fin_lead\)".*/\1/p' scripts/demo-seed.json)

# ---------------------------------------------------------------------------
# 4. Migrate and seed.
# ---------------------------------------------------------------------------
begin "migrating $(redact "$DATABASE_URL")"
"$bin_dir/idemctl" migrate >>"$logf" 2>&1
end

begin "seeding the demo tenant acme (scripts/demo-seed.json)"
"$bin_dir/idemctl" seed --file scripts/demo-seed.json >>"$logf" 2>&1
end

# ---------------------------------------------------------------------------
# 5. Start.
# ---------------------------------------------------------------------------
# wait_for WHAT PID LOG COMMAND...: until COMMAND succeeds; fails with the end
# of LOG when PID exits or a minute passes.
wait_for() {
	local what=$1 pid=$2 logfile=$3 deadline=$((SECONDS + 60))
	shift 3
	until "$@" >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || fail "$what exited" "$logfile"
		((SECONDS < deadline)) || fail "$what is not ready after 60s" "$logfile"
		sleep 0.2
	done
}
# worker_url LOG: the worker's metrics server (it listens on a free port).
worker_url() {
	sed -n 's/.*"msg":"worker starting".*"metrics":"\(http:[^"]*\)\/metrics".*/\1/p' "$1" | tail -n 1
}
# shellcheck disable=SC2317 # run by wait_for
worker_ready() {
	local url
	url=$(worker_url "$1")
	[[ -n $url ]] && curl -fsS "$url/healthz"
}

stripe_name=stripe-mock
[[ $stripe == test ]] && stripe_name="the test Stripe"
if ((postgres)); then
	begin "starting $stripe_name, Mailpit, the api and two workers"
else
	begin "starting $stripe_name, Mailpit and the api"
fi
if [[ $stripe == test ]]; then
	# The demo seed's charges (id:amount:currency), as its orders name them.
	charge_args=()
	while read -r c; do
		charge_args+=(-charge "$c")
	done < <(sed -n 's/.*"charge_id": *"\([^"]*\)".*"amount_cents": *\([0-9]*\).*"currency": *"\([^"]*\)".*/\1:\2:\3/p' scripts/demo-seed.json)
	# A run before left its URL: the new test Stripe writes its own.
	rm -f "$dev_dir/teststripe.url"
	"$bin_dir/teststripe" -addr 127.0.0.1:0 "${charge_args[@]}" >"$dev_dir/teststripe.url" 2>"$dev_dir/teststripe.log" &
	stripe_pid=$!
	wait_for "the test Stripe" "$stripe_pid" "$dev_dir/teststripe.log" test -s "$dev_dir/teststripe.url"
	teststripe_url=$(head -n 1 "$dev_dir/teststripe.url")
	wait_for "the test Stripe" "$stripe_pid" "$dev_dir/teststripe.log" curl -fsS "$teststripe_url/_stats"
	# services_start uses the Stripe it finds in STRIPE_MOCK_URL instead of
	# starting stripe-mock.
	export STRIPE_MOCK_URL=$teststripe_url
fi
export SERVICES_MAILPIT_SMTP=$smtp_addr SERVICES_MAILPIT_UI=$ui_addr SERVICES_MAILPIT_DB=$dev_dir/mailpit.db
services_start >>"$logf" 2>&1
stripe_url=$STRIPE_MOCK_URL
export STRIPE_API_KEY=sk_test_123 STRIPE_API_BASE=$stripe_url SMTP_ADDR=$MAILPIT_SMTP_ADDR
"$bin_dir/idemgate-api" >"$dev_dir/api.log" 2>&1 &
api_pid=$!
if ((postgres)); then
	for i in 1 2; do
		IDEMGATE_WORKER_ADDR=127.0.0.1:0 "$bin_dir/idemgate-worker" >"$dev_dir/worker-$i.log" 2>&1 &
		worker_pids+=($!)
	done
fi
wait_for "the api" "$api_pid" "$dev_dir/api.log" curl -fsS "$base/readyz"
for i in "${!worker_pids[@]}"; do
	wait_for "worker $((i + 1))" "${worker_pids[i]}" "$dev_dir/worker-$((i + 1)).log" worker_ready "$dev_dir/worker-$((i + 1)).log"
done
end

# ---------------------------------------------------------------------------
# 6. What to do next.
# ---------------------------------------------------------------------------
riverui="$base/ops/riverui/"
if [[ $(curl -s -o /dev/null -w '%{http_code}' -u "$ops_user:$ops_password" "$riverui") == 404 ]]; then
	riverui="(not served by this build on SQLite: scripts/dev.sh --postgres has it)"
fi
logs="$(show "$dev_dir/api.log")"
metrics="$base/metrics"
if ((postgres)); then
	logs+=", $(show "$dev_dir/worker-1.log"), $(show "$dev_dir/worker-2.log")"
	metrics+=" (workers: $(worker_url "$dev_dir/worker-1.log")/metrics, $(worker_url "$dev_dir/worker-2.log")/metrics)"
fi
curl_line="curl -s -X POST $base/v1/tools/refund_order -H 'Authorization: Bearer $token' -H 'Idempotency-Key: demo-refund-0001' -H 'Content-Type: application/json' -d '{\"order_id\":\"ord_9f2\",\"amount_cents\":1500}'"
# idemctl's op commands need Postgres in builds without them on SQLite: then
# the line lists the tenant's tokens instead.
idemctl_cmd="op list --tenant acme"
idemctl_about="the tenant's operations; also op get, op redrive, token create"
if ! "$bin_dir/idemctl" op list --tenant acme --limit 1 >/dev/null 2>&1; then
	idemctl_cmd="token list --tenant acme"
	idemctl_about="the tenant's tokens; also token create, token revoke"
fi
idemctl_line="DATABASE_URL='$DATABASE_URL' $bin_dir/idemctl $idemctl_cmd"

if [[ $stripe == test ]]; then
	stripe_about="  Test Stripe (counts refunds):    $stripe_url   (log $(show "$dev_dir/teststripe.log"))
    decline ch_456 (order ord_a71):  curl -s -X POST $stripe_url/_charges -d '{\"id\":\"ch_456\",\"amount\":12000,\"fail\":{}}'
    accept it again:                 curl -s -X POST '$stripe_url/_clear_charge_error?id=ch_456'
    the refunds it counted:          curl -s $stripe_url/_stats"
else
	stripe_about="  stripe-mock (Stripe's API):      $stripe_url   (--stripe test: a Stripe that declines and counts)"
fi

# The variables another shell sources to reach this quickstart (the README's
# runnable blocks use them).
env_file=$dev_dir/env
q() { printf '%q' "$1"; }
{
	printf '# scripts/dev.sh %s, %s: source this file in another shell. Removed when dev.sh stops.\n' "$*" "$(date -u +%FT%TZ)"
	printf 'export IDEMGATE_URL=%s\n' "$(q "$base")"
	printf 'export IDEMGATE_TOKEN=%s\n' "$(q "$token")"
	printf 'export IDEMGATE_APPROVER_TOKEN=%s\n' "$(q "$approver_token")"
	printf 'export DATABASE_URL=%s\n' "$(q "$DATABASE_URL")"
	printf 'export IDEMGATE_OPS_USER=%s IDEMGATE_OPS_PASSWORD=%s\n' "$(q "$ops_user")" "$(q "$ops_password")"
	printf 'export MAILPIT_API_URL=%s\n' "$(q "$MAILPIT_API_URL")"
	printf 'export STRIPE_URL=%s\n' "$(q "$stripe_url")"
	[[ $stripe == test ]] && printf 'export TESTSTRIPE_URL=%s\n' "$(q "$stripe_url")"
	printf 'export PATH=%s:"$PATH"\n' "$(q "$bin_dir")"
} >"$env_file.tmp"
mv "$env_file.tmp" "$env_file"

cat <<MSG

idemgate is running on $where.

  MCP endpoint (Streamable HTTP):  $base/mcp
  Demo token (tenant acme):        $token
  Approver token (fin-lead):       $approver_token   (approves large refunds at $base/approvals/…)
  Operator login (HTTP Basic):     $ops_user / $ops_password   (for /ops; kept in $(show "$dev_dir/ops-password"))
  River UI:                        $riverui
  Mailpit (reset, approval mail):  $MAILPIT_API_URL   (SMTP $MAILPIT_SMTP_ADDR; mailbox $(show "$dev_dir/mailpit.db"))
$stripe_about
  Metrics:                         $metrics
  Logs:                            $logs; setup: $(show "$logf")

MCP client configuration (Claude Desktop's claude_desktop_config.json, via mcp-remote):
{
  "mcpServers": {
    "idemgate": {
      "command": "npx",
      "args": ["-y", "mcp-remote", "$base/mcp", "--header", "Authorization:Bearer $token"]
    }
  }
}
MCP Inspector: npx @modelcontextprotocol/inspector  (transport "Streamable HTTP",
URL $base/mcp, header Authorization: Bearer $token)

Make a refund (run it twice: the second answer is replayed, not a second refund):
$curl_line

idemctl on the same database ($idemctl_about):
$idemctl_line

In another shell, these as variables (IDEMGATE_URL, IDEMGATE_TOKEN, DATABASE_URL,
STRIPE_URL, ..., and idemctl on PATH):
source $(show "$env_file")

Press Ctrl-C to stop.
MSG

# ---------------------------------------------------------------------------
# DEV_SMOKE: what the printout promises, checked.
# ---------------------------------------------------------------------------
smoke_fail() { fail "smoke: $1" "$dev_dir/api.log"; }
# refund KEY: the printed curl line's request; prints the HTTP status.
refund() {
	curl -sS -D "$dev_dir/smoke.headers" -o "$dev_dir/smoke.json" -w '%{http_code}' -X POST "$base/v1/tools/refund_order" \
		-H "Authorization: Bearer $token" -H "Idempotency-Key: $1" -H 'Content-Type: application/json' \
		-d '{"order_id":"ord_a71","amount_cents":100}'
}
if [[ -n ${DEV_SMOKE:-} ]]; then
	key="smoke-refund-$(date +%s%N)"
	status=$(refund "$key")
	[[ $status == 200 || $status == 202 ]] || smoke_fail "the refund answered $status: $(cat "$dev_dir/smoke.json")"
	# Its outcome, however long the worker takes on a busy machine.
	deadline=$((SECONDS + 120))
	until curl -fsS -o "$dev_dir/smoke-op.json" -H "Authorization: Bearer $token" "$base/v1/operations/refund_order/$key" &&
		grep -q '"status":"succeeded"' "$dev_dir/smoke-op.json"; do
		if grep -q '"status":"failed"' "$dev_dir/smoke-op.json" 2>/dev/null; then
			smoke_fail "the refund failed: $(cat "$dev_dir/smoke-op.json")"
		fi
		((SECONDS < deadline)) || smoke_fail "the refund did not succeed within 120s: $(cat "$dev_dir/smoke-op.json" 2>/dev/null)"
		sleep 0.2
	done
	status=$(refund "$key")
	if [[ $status != 200 ]] || ! grep -q '"status":"succeeded"' "$dev_dir/smoke.json"; then
		smoke_fail "the retry answered $status: $(cat "$dev_dir/smoke.json")"
	fi
	grep -qi '^Idempotent-Replayed: true' "$dev_dir/smoke.headers" || smoke_fail "the retry was not a replay"
	log "smoke: the refund succeeded through $stripe_name; the retry was replayed"
	(eval "$idemctl_line") >"$dev_dir/smoke-idemctl.json" 2>>"$logf" || fail "smoke: the printed idemctl line failed"
	want="\"$key\""
	[[ $idemctl_cmd == token* ]] && want='"user":"support-bot"'
	grep -qF "$want" "$dev_dir/smoke-idemctl.json" || fail "smoke: the printed idemctl line does not list $want"
	log "smoke: the printed idemctl line works (it lists $want)"
	curl -fsS "$MAILPIT_API_URL/api/v1/info" | grep -qF "\"Database\":\"$dev_dir/mailpit.db\"" ||
		fail "smoke: Mailpit at $MAILPIT_API_URL does not keep its mailbox in $dev_dir/mailpit.db"
	log "smoke: Mailpit answers at $MAILPIT_API_URL with the mailbox beside the database"
	if ((postgres)); then
		curl -fsS -o /dev/null -u "$ops_user:$ops_password" "$riverui" || smoke_fail "River UI ($riverui) refused the printed operator login"
		status=$(curl -s -o /dev/null -w '%{http_code}' "$riverui")
		[[ $status == 401 ]] || smoke_fail "River UI answered $status without a login (want 401)"
		log "smoke: River UI opens with the printed operator login, and not without"
	fi
	exit 0
fi
if [[ -n ${DEV_EXIT_AFTER_READY:-} ]]; then
	exit 0
fi

# Until Ctrl-C, or until a process exits by itself.
set +e
wait -n "$api_pid" "${worker_pids[@]}" ${stripe_pid:+"$stripe_pid"}
rc=$?
set -e
log "a process stopped by itself (status $rc): stopping the rest; see $logs"
exit 1
