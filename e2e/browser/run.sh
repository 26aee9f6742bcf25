#!/usr/bin/env bash
# e2e/browser/run.sh: idemgate in a real browser, on each engine. A headless
# Chromium (Debian's package), driven by playwright-core, retries the
# cancelled job of a failed refund in River UI, and the operator routes re-drive the
# operation through the gate in the operator's name; an operator's Cancel of a queued
# refund's job in River UI fails the operation job_cancelled_by_operator (not the
# owner's cancelled), and `idemctl op redrive` (--dry-run first) runs it
# once; it opens a password-reset link from Mailpit
# and redeems it on the api's page; and on the approval page
# (/approvals/<operation id>) fin-lead approves a refund above acme's
# threshold (it runs once at the test Stripe), the requester's own approval
# is refused (four eyes), a denial refunds nothing, and a page of another
# origin decides nothing; MCP clients (the TypeScript SDK's 2025-11-25
# tasks, the go-sdk's 2026-07-28 calls and the tasks extension through
# e2e/goclient) wait for an approval given on the page, and a denied or
# expired one refunds nothing. Runs from any directory.
#
#   e2e/browser/run.sh [ENGINE...] [NODE_ARGS...]
#
# ENGINE is postgres or sqlite; with none given, both, in that order (what
# scripts/test.sh runs). The remaining arguments go to `node --test`.
#
# What it does:
#   1. installs Chromium with apt-get when /usr/bin/chromium is missing (as
#      root, or through sudo);
#   2. builds cmd/api, cmd/worker, cmd/idemctl and the test Stripe
#      (internal/stripetest/cmd/teststripe) into a temporary directory, and
#      runs `npm ci` in e2e/browser when node_modules is missing or stale:
#      once, for every engine;
#   then for each engine:
#   3. makes a fresh database: on postgres idemgate_browser_<random> on the
#      server of TEST_DATABASE_URL (an admin URL; default the local
#      Postgres), dropped afterwards; on sqlite a file in the temporary
#      directory (DATABASE_URL=sqlite:PATH);
#   4. runs `idemctl migrate` and `idemctl seed --file e2e/browser/seed.json`;
#   5. starts a fresh test Stripe and the api (with fresh IDEMGATE_OPS_USER
#      and IDEMGATE_OPS_PASSWORD) on free loopback ports, and on postgres
#      the worker; on sqlite the api runs the worker in process, as the
#      quickstart does; the worker mails to the Mailpit of MAILPIT_SMTP_ADDR
#      and MAILPIT_API_URL (scripts/test.sh starts one; without them,
#      scripts/services.sh's), its links pointing to the api's page;
#   6. runs `node --test e2e/browser/*.test.mjs` with IDEMGATE_ENGINE,
#      IDEMGATE_URL, TESTSTRIPE_URL, IDEMGATE_TOKEN_ACME, IDEMGATE_OPS_USER,
#      IDEMGATE_OPS_PASSWORD, IDEMCTL, GOCLIENT, DATABASE_URL and MAILPIT_API_URL
#      (the other tokens are seed.json's); the files run at the same time
#      against one test Stripe, so each counts the refunds of its own charge
#      or operation;
#   7. stops what it started, printing the logs when anything failed.
#
# Needs: go, node 20+ and npm, psql, curl; apt-get for Chromium. An engine
# on which node ran no test fails.
#
#   e2e/browser/run.sh -h | --help    this text; starts nothing
set -euo pipefail

browser_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$browser_dir/../.." && pwd)
cd "$root"

log() { printf 'e2e/browser: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit 0
fi

# shellcheck source=e2e/lib.sh
source "$root/e2e/lib.sh"
e2e_require_tools

engines=()
while (($# > 0)) && [[ $1 == postgres || $1 == sqlite ]]; do
	engines+=("$1")
	shift
done
((${#engines[@]} > 0)) || engines=(postgres sqlite)

# ---------------------------------------------------------------------------
# 1. Chromium, from Debian
# ---------------------------------------------------------------------------
export CHROMIUM_PATH=${CHROMIUM_PATH:-/usr/bin/chromium}
if [[ ! -x "$CHROMIUM_PATH" ]]; then
	as_root=()
	if [[ $EUID -ne 0 ]]; then
		command -v sudo >/dev/null || die "$CHROMIUM_PATH is missing and this is not root: install it (apt-get install chromium)"
		as_root=(sudo)
	fi
	log "installing chromium with apt-get"
	"${as_root[@]}" apt-get update -qq >&2
	"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
	[[ -x "$CHROMIUM_PATH" ]] || die "apt-get installed chromium but $CHROMIUM_PATH is still missing"
fi
log "$("$CHROMIUM_PATH" --version 2>/dev/null | head -n 1)"

# sqlite3, with which approval-mcp.test.mjs moves an approval window into
# the past on the SQLite engine.
if ! command -v sqlite3 >/dev/null; then
	log "installing sqlite3 with apt-get"
	as_root=()
	[[ $EUID -ne 0 ]] && as_root=(sudo)
	"${as_root[@]}" apt-get update -qq >&2
	"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sqlite3 >&2
fi

admin_url=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}

# Mailpit for the password-reset mail: the caller's, else one of our own
# (stopped on exit).
if [[ -z ${MAILPIT_SMTP_ADDR:-} || -z ${MAILPIT_API_URL:-} ]]; then
	# shellcheck source=scripts/services.sh
	source "$root/scripts/services.sh"
	services_start || die "could not start Mailpit (scripts/services.sh)"
fi
export MAILPIT_API_URL

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-browser.XXXXXX")
db=""
pids=()
names=()

# stop_all stops every process start started, and forgets them.
stop_all() {
	local i
	for i in "${!pids[@]}"; do
		kill "${pids[$i]}" 2>/dev/null
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" 2>/dev/null
	done
	pids=()
	names=()
}

cleanup() {
	local rc=$?
	set +e
	local i
	for i in "${!pids[@]}"; do
		kill "${pids[$i]}" 2>/dev/null
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" 2>/dev/null
	done
	if [[ $rc -ne 0 ]]; then
		for i in "${!names[@]}"; do
			if [[ -s "$tmp/${names[$i]}.log" ]]; then
				log "${names[$i]} log:"
				sed "s/^/  ${names[$i]}| /" "$tmp/${names[$i]}.log" >&2
			fi
		done
	fi
	e2e_drop_database
	declare -F services_stop >/dev/null && services_stop
	rm -rf "$tmp"
	if [[ $rc -eq 0 ]]; then
		log "OK"
	else
		log "FAILED (exit $rc)"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME CMD...: runs CMD in the background, its output in $tmp/NAME.log
# (and stdout alone in $tmp/NAME.out).
start() {
	local name=$1
	shift
	# The logs exist before the process does: a reader polling them must not
	# race the background redirection on a busy machine.
	: >"$tmp/$name.out"
	: >"$tmp/$name.log"
	"$@" >"$tmp/$name.out" 2>"$tmp/$name.log" &
	pids+=($!)
	names+=("$name")
}

# alive NAME: is the process started as NAME still running?
alive() {
	local i
	for i in "${!names[@]}"; do
		[[ ${names[$i]} == "$1" ]] && { kill -0 "${pids[$i]}" 2>/dev/null; return; }
	done
	return 1
}

# log_field NAME MSG FIELD: the FIELD of the first JSON log record of NAME
# whose msg is MSG ("" while there is none).
log_field() {
	node -e '
		const fs = require("node:fs");
		const [file, msg, field] = process.argv.slice(1);
		for (const line of fs.readFileSync(file, "utf8").split("\n")) {
			try {
				const rec = JSON.parse(line);
				if (rec.msg === msg && rec[field] !== undefined) { process.stdout.write(String(rec[field])); break; }
			} catch {}
		}
	' "$tmp/$1.log" "$2" "$3"
}


# wait_log NAME MSG FIELD WHAT: waits up to 60s for NAME to log MSG with
# FIELD, and prints the field; dies when NAME exits first.
wait_log() {
	local value=""
	for _ in $(seq 1 600); do
		alive "$1" || die "the $1 exited during start"
		value=$(log_field "$1" "$2" "$3")
		[[ -n "$value" ]] && break
		sleep 0.1
	done
	[[ -n "$value" ]] || die "$4 within 60s"
	printf '%s' "$value"
}

# ---------------------------------------------------------------------------
# 2. build, and the browser test's packages: once for every engine
# ---------------------------------------------------------------------------
log "building cmd/api, cmd/worker, cmd/idemctl, teststripe and e2e/goclient"
go build -o "$tmp/bin/" ./cmd/api ./cmd/worker ./cmd/idemctl ./internal/stripetest/cmd/teststripe ./e2e/goclient
export IDEMCTL="$tmp/bin/idemctl" # the test reads the audit trail with it
export GOCLIENT="$tmp/bin/goclient" # the go-sdk client of approval-mcp.test.mjs

installed="$browser_dir/node_modules/.package-lock.json"
if [[ ! -f "$installed" || "$browser_dir/package-lock.json" -nt "$installed" || "$browser_dir/package.json" -nt "$installed" ]]; then
	log "npm ci in e2e/browser"
	(cd "$browser_dir" && npm ci --no-audit --no-fund >&2)
fi

IDEMGATE_TOKEN_ACME=$(node -e '
	const t = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")).tokens
		.find((t) => t.tenant === "acme" && t.user === "support-bot");
	process.stdout.write(t.token);
' "$browser_dir/seed.json")
export IDEMGATE_TOKEN_ACME

# Fresh operator credentials for this run; never printed.
IDEMGATE_OPS_USER=ops-browser
IDEMGATE_OPS_PASSWORD=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export IDEMGATE_OPS_USER IDEMGATE_OPS_PASSWORD
secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')

idemctl() {
	if ! "$IDEMCTL" "$@" >"$tmp/idemctl.out" 2>&1; then
		sed 's/^/  idemctl| /' "$tmp/idemctl.out" >&2
		die "idemctl $1 failed"
	fi
}

# 3. and 4. a fresh database of engine $1, migrated and seeded: exports
# DATABASE_URL.
make_database() {
	if [[ $1 == postgres ]]; then
		e2e_create_database idemgate_browser
		DATABASE_URL=$database_url
	else
		mkdir -p "$tmp/sqlite"
		DATABASE_URL="sqlite:$tmp/sqlite/idemgate.db"
		log "database $DATABASE_URL"
	fi
	export DATABASE_URL
	idemctl migrate
	idemctl seed --file "$browser_dir/seed.json"
}

# 5. the test Stripe, the api and (on postgres) the worker of engine $1:
# exports TESTSTRIPE_URL and IDEMGATE_URL.
start_services() {
	local engine=$1 addr ready=0
	start "$engine-teststripe" "$tmp/bin/teststripe" -addr 127.0.0.1:0
	TESTSTRIPE_URL=""
	for _ in $(seq 1 600); do
		alive "$engine-teststripe" || die "the test Stripe exited during start"
		TESTSTRIPE_URL=$(head -n 1 "$tmp/$engine-teststripe.out" 2>/dev/null || true)
		[[ $TESTSTRIPE_URL == http://* ]] && break
		TESTSTRIPE_URL=""
		sleep 0.1
	done
	[[ -n "$TESTSTRIPE_URL" ]] || die "the test Stripe did not print its URL within 60s"
	export TESTSTRIPE_URL
	log "test Stripe at $TESTSTRIPE_URL"

	# The worker's settings: the api's own worker reads them on sqlite. The
	# api's port is chosen first, so that the reset links can name it.
	local port
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	local worker_env=(STRIPE_API_KEY=sk_test_browser "STRIPE_API_BASE=$TESTSTRIPE_URL" "IDEMGATE_SECRET=$secret"
		IDEMGATE_REAPER_INTERVAL=1s "SMTP_ADDR=$MAILPIT_SMTP_ADDR" "IDEMGATE_RESET_LINK_BASE=http://127.0.0.1:$port/reset-password")
	start "$engine-api" env "${worker_env[@]}" "IDEMGATE_API_ADDR=127.0.0.1:$port" IDEMGATE_WAIT=200ms "$tmp/bin/api"
	addr=$(wait_log "$engine-api" "api listening" addr "the api did not log its address")
	export IDEMGATE_URL="http://$addr"
	for _ in $(seq 1 600); do
		alive "$engine-api" || die "the api exited during start"
		if curl -fsS -o /dev/null --max-time 2 "$IDEMGATE_URL/readyz" 2>/dev/null; then
			ready=1
			break
		fi
		sleep 0.1
	done
	((ready)) || die "$IDEMGATE_URL/readyz did not answer 200 within 60s"
	log "api ready at $IDEMGATE_URL"

	local worker=$engine-api
	if [[ $engine == postgres ]]; then
		worker=$engine-worker
		start "$worker" env "${worker_env[@]}" "IDEMGATE_API_ADDR=$addr" IDEMGATE_WORKER_ADDR=127.0.0.1:0 "$tmp/bin/worker"
	fi
	wait_log "$worker" "River client started" client_id "the $worker's River client did not start" >/dev/null
	log "worker started ($worker)"
}

# ---------------------------------------------------------------------------
# For each engine: 3. to 7.
# ---------------------------------------------------------------------------
for engine in "${engines[@]}"; do
	log "engine $engine"
	make_database "$engine"
	start_services "$engine"

	log "node --test ($engine)"
	IDEMGATE_ENGINE=$engine node --test --test-reporter=spec --test-reporter-destination=stdout \
		--test-reporter=tap --test-reporter-destination="$tmp/tap-$engine" "$@" "$browser_dir"/*.test.mjs
	e2e_require_tests_ran "$tmp/tap-$engine"

	# Credentials are never logged.
	for name in "${names[@]}"; do
		if grep -qF -- "$IDEMGATE_OPS_PASSWORD" "$tmp/$name.log" "$tmp/$name.out"; then
			die "the $name logged the operator password"
		fi
	done
	stop_all
	e2e_drop_database
	db=""
	log "engine $engine: OK"
done
