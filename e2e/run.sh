#!/usr/bin/env bash
# e2e/run.sh: end-to-end tests of the api's MCP endpoint, with the official
# MCP TypeScript SDK as the client (1.x on 2025-11-25, v2 on 2026-07-28).
# Runs from any directory.
#
#   e2e/run.sh                                  every e2e/*.test.mjs
#   e2e/run.sh --test-name-pattern=conflict     extra arguments go to `node --test`
#
# What it does:
#   1. creates a fresh database idemgate_e2e_<random> on the server of
#      TEST_DATABASE_URL (an admin URL; default the local Postgres) and drops
#      it on exit;
#   2. builds cmd/api and cmd/idemctl into a temporary directory;
#   3. runs `idemctl migrate` and `idemctl seed --file e2e/seed.json`;
#   4. starts the api on a free loopback port (IDEMGATE_WAIT=200ms, no worker)
#      and waits for /readyz; starts the test Stripe (internal/stripetest)
#      and exports what e2e/tasks.test.mjs and e2e/v2.test.mjs need to run
#      a worker of their own (IDEMGATE_WORKER_BIN, IDEMGATE_TEST_STRIPE_URL,
#      E2E_WORKER_*);
#   5. runs `npm ci` in e2e/ when node_modules is missing or stale, then
#      `node --test e2e/*.test.mjs` (one file at a time) with IDEMGATE_URL and the seeded tokens
#      (IDEMGATE_TOKEN_ACME, IDEMGATE_TOKEN_ACME_READONLY, IDEMGATE_TOKEN_GLOBEX);
#   6. stops the api, printing its log when anything failed.
#
#   e2e/run.sh --exec CMD [ARGS...]             steps 1 to 4, then CMD ARGS
#                                               (with the same environment)
#                                               instead of step 5; its exit
#                                               status is the run's
#                                               (scripts/conformance.sh)
#
# Needs: go, node 20+ and npm, psql, curl. A run in which node ran no test
# (a pattern that matches none, say) fails.
#
#   e2e/run.sh -h | --help                      this text; starts nothing
set -euo pipefail

e2e_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$e2e_dir/.." && pwd)
cd "$root"

log() { printf 'e2e: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit 0
fi

exec_cmd=()
if [[ ${1:-} == --exec ]]; then
	shift
	(($#)) || die "--exec needs a command"
	exec_cmd=("$@")
	set --
fi

# shellcheck source=e2e/lib.sh
source "$root/e2e/lib.sh"
e2e_require_tools

admin_url=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-e2e.XXXXXX")
db=""
api_pid=""
stripe_pid=""
api_log="$tmp/api.log"

cleanup() {
	local rc=$?
	set +e
	if [[ -n "$api_pid" ]]; then
		kill "$api_pid" 2>/dev/null
		wait "$api_pid" 2>/dev/null
	fi
	if [[ -n "$stripe_pid" ]]; then
		kill "$stripe_pid" 2>/dev/null
		wait "$stripe_pid" 2>/dev/null
	fi
	if [[ $rc -ne 0 && -s "$api_log" ]]; then
		log "api log ($api_log):"
		sed 's/^/  api| /' "$api_log" >&2
	fi
	e2e_drop_database
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

# ---------------------------------------------------------------------------
# 1. a fresh database
# ---------------------------------------------------------------------------
e2e_create_database idemgate_e2e

# ---------------------------------------------------------------------------
# 2. build
# ---------------------------------------------------------------------------
log "building cmd/api, cmd/worker, cmd/idemctl and the test Stripe"
go build -o "$tmp/api" ./cmd/api
go build -o "$tmp/worker" ./cmd/worker
go build -o "$tmp/idemctl" ./cmd/idemctl
go build -o "$tmp/teststripe" ./internal/stripetest/cmd/teststripe

# ---------------------------------------------------------------------------
# 3. migrate and seed
# ---------------------------------------------------------------------------
export DATABASE_URL=$database_url
# idemctl's output is shown only when it fails.
idemctl() {
	if ! "$tmp/idemctl" "$@" >"$tmp/idemctl.log" 2>&1; then
		sed 's/^/  idemctl| /' "$tmp/idemctl.log" >&2
		die "idemctl $1 failed"
	fi
}
idemctl migrate
idemctl seed --file "$e2e_dir/seed.json"

# The fixed tokens of the seed file, by tenant and user.
seed_token() {
	node -e '
		const fs = require("node:fs");
		const [file, tenant, user] = process.argv.slice(1);
		const t = (JSON.parse(fs.readFileSync(file, "utf8")).tokens || [])
			.find((t) => t.tenant === tenant && t.user === user && t.token);
		if (!t) { console.error(`e2e: ${file} has no fixed token for ${tenant}/${user}`); process.exit(1); }
		process.stdout.write(t.token);
	' "$e2e_dir/seed.json" "$1" "$2"
}
IDEMGATE_TOKEN_ACME=$(seed_token acme support-bot)
IDEMGATE_TOKEN_ACME_READONLY=$(seed_token acme auditor)
IDEMGATE_TOKEN_GLOBEX=$(seed_token globex support-bot)
export IDEMGATE_TOKEN_ACME IDEMGATE_TOKEN_ACME_READONLY IDEMGATE_TOKEN_GLOBEX

# ---------------------------------------------------------------------------
# 4. the api, on a port the kernel picks; its log says which
# ---------------------------------------------------------------------------
# The log exists first: the loop below reads it at once, and on a busy
# machine the background redirection may not have run yet.
: >"$api_log"
IDEMGATE_API_ADDR=127.0.0.1:0 IDEMGATE_WAIT=200ms IDEMGATE_LOG_LEVEL=debug \
	"$tmp/api" >"$api_log" 2>&1 &
api_pid=$!

addr=""
for _ in $(seq 1 600); do
	kill -0 "$api_pid" 2>/dev/null || die "the api exited during start"
	addr=$(node -e '
		const fs = require("node:fs");
		for (const line of fs.readFileSync(process.argv[1], "utf8").split("\n")) {
			try {
				const rec = JSON.parse(line);
				if (rec.msg === "api listening" && rec.addr) { process.stdout.write(rec.addr); break; }
			} catch {}
		}
	' "$api_log")
	[[ -n "$addr" ]] && break
	sleep 0.1
done
[[ -n "$addr" ]] || die "the api did not log its address within 60s"
export IDEMGATE_URL="http://$addr"

ready=0
for _ in $(seq 1 600); do
	kill -0 "$api_pid" 2>/dev/null || die "the api exited during start"
	if curl -fsS -o /dev/null --max-time 2 "$IDEMGATE_URL/readyz" 2>/dev/null; then
		ready=1
		break
	fi
	sleep 0.1
done
((ready)) || die "$IDEMGATE_URL/readyz did not answer 200 within 60s"
log "api ready at $IDEMGATE_URL"

# ---------------------------------------------------------------------------
# 4b. the test Stripe (counts refunds per downstream key) and what a test
#     needs to start and stop a worker of its own (e2e/tasks.test.mjs,
#     e2e/v2.test.mjs)
# ---------------------------------------------------------------------------
: >"$tmp/teststripe.out"
"$tmp/teststripe" -auto-charge-amount 1000000 >"$tmp/teststripe.out" 2>"$tmp/teststripe.log" &
stripe_pid=$!
stripe_url=""
for _ in $(seq 1 600); do
	kill -0 "$stripe_pid" 2>/dev/null || die "the test Stripe exited during start: $(cat "$tmp/teststripe.log")"
	stripe_url=$(head -n 1 "$tmp/teststripe.out")
	[[ -n "$stripe_url" ]] && break
	sleep 0.1
done
[[ -n "$stripe_url" ]] || die "the test Stripe did not print its URL within 60s"
export IDEMGATE_TEST_STRIPE_URL=$stripe_url
export IDEMGATE_WORKER_BIN="$tmp/worker"
# The worker's settings, for the test that starts it (the api above runs
# without them).
E2E_WORKER_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export E2E_WORKER_STRIPE_API_BASE=$stripe_url E2E_WORKER_SECRET

if ((${#exec_cmd[@]})); then
	log "running ${exec_cmd[*]}"
	"${exec_cmd[@]}"
	exit 0
fi

# ---------------------------------------------------------------------------
# 5. the MCP TypeScript SDK client
# ---------------------------------------------------------------------------
# npm ci when node_modules is missing or older than the lock file (npm keeps
# its own copy of the installed tree in node_modules/.package-lock.json).
installed="$e2e_dir/node_modules/.package-lock.json"
if [[ ! -f "$installed" || "$e2e_dir/package-lock.json" -nt "$installed" || "$e2e_dir/package.json" -nt "$installed" ]]; then
	log "npm ci in e2e/"
	(cd "$e2e_dir" && npm ci --no-audit --no-fund >&2)
fi

log "node --test"
# One file at a time: tasks.test.mjs starts a worker, which the other
# files' assertions (operations that stay queued) must not meet.
# A second reporter (TAP, to a file) counts the tests that ran: none is a
# failure, not an OK.
node --test --test-concurrency=1 --test-reporter=spec --test-reporter-destination=stdout \
	--test-reporter=tap --test-reporter-destination="$tmp/tap" "$@" "$e2e_dir"/*.test.mjs
e2e_require_tests_ran "$tmp/tap"
