#!/usr/bin/env bash
# e2e/browser/run.sh: idemgate in a real browser. A headless Chromium (Debian's
# package), driven by playwright-core, retries the cancelled job of a failed
# refund in River UI, and the worker re-drives the operation through the gate;
# and it opens a password-reset link from Mailpit and redeems it on the api's
# page. Runs from any directory.
#
#   e2e/browser/run.sh                                extra arguments go to `node --test`
#
# What it does:
#   1. installs Chromium with apt-get when /usr/bin/chromium is missing (as
#      root, or through sudo);
#   2. creates a fresh database idemgate_browser_<random> on the server of
#      TEST_DATABASE_URL (an admin URL; default the local Postgres) and drops
#      it on exit;
#   3. builds cmd/api, cmd/worker, cmd/idemctl and the test Stripe
#      (internal/stripetest/cmd/teststripe) into a temporary directory;
#   4. runs `idemctl migrate` and `idemctl seed --file e2e/browser/seed.json`;
#   5. starts the test Stripe, the api (with fresh IDEMGATE_OPS_USER and
#      IDEMGATE_OPS_PASSWORD) and the worker on free loopback ports, the
#      worker mailing to the Mailpit of MAILPIT_SMTP_ADDR and MAILPIT_API_URL
#      (scripts/test.sh starts one; without them, scripts/services.sh's);
#   6. runs `npm ci` in e2e/browser when node_modules is missing or stale,
#      then `node --test e2e/browser/*.test.mjs` with IDEMGATE_URL,
#      TESTSTRIPE_URL, IDEMGATE_TOKEN_ACME, IDEMGATE_OPS_USER,
#      IDEMGATE_OPS_PASSWORD, IDEMCTL, DATABASE_URL and MAILPIT_API_URL;
#   7. stops everything, printing the logs when anything failed.
#
# Needs: go, node 20+ and npm, psql, curl; apt-get for Chromium.
set -euo pipefail

browser_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$browser_dir/../.." && pwd)
cd "$root"

log() { printf 'e2e/browser: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=e2e/lib.sh
source "$root/e2e/lib.sh"
e2e_require_tools

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

# ---------------------------------------------------------------------------
# 2. a fresh database
# ---------------------------------------------------------------------------
e2e_create_database idemgate_browser

# ---------------------------------------------------------------------------
# 3. build
# ---------------------------------------------------------------------------
log "building cmd/api, cmd/worker, cmd/idemctl and teststripe"
go build -o "$tmp/bin/" ./cmd/api ./cmd/worker ./cmd/idemctl ./internal/stripetest/cmd/teststripe

# ---------------------------------------------------------------------------
# 4. migrate and seed
# ---------------------------------------------------------------------------
export DATABASE_URL=$database_url
idemctl() {
	if ! "$tmp/bin/idemctl" "$@" >"$tmp/idemctl.out" 2>&1; then
		sed 's/^/  idemctl| /' "$tmp/idemctl.out" >&2
		die "idemctl $1 failed"
	fi
}
idemctl migrate
idemctl seed --file "$browser_dir/seed.json"
export IDEMCTL="$tmp/bin/idemctl" # the test reads the audit trail with it
IDEMGATE_TOKEN_ACME=$(node -e '
	const t = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")).tokens
		.find((t) => t.tenant === "acme" && t.user === "support-bot");
	process.stdout.write(t.token);
' "$browser_dir/seed.json")
export IDEMGATE_TOKEN_ACME

# ---------------------------------------------------------------------------
# 5. the test Stripe, the api and the worker
# ---------------------------------------------------------------------------
start teststripe "$tmp/bin/teststripe" -addr 127.0.0.1:0
TESTSTRIPE_URL=""
for _ in $(seq 1 600); do
	alive teststripe || die "the test Stripe exited during start"
	TESTSTRIPE_URL=$(head -n 1 "$tmp/teststripe.out" 2>/dev/null || true)
	[[ $TESTSTRIPE_URL == http://* ]] && break
	TESTSTRIPE_URL=""
	sleep 0.1
done
[[ -n "$TESTSTRIPE_URL" ]] || die "the test Stripe did not print its URL within 60s"
export TESTSTRIPE_URL
log "test Stripe at $TESTSTRIPE_URL"

# Fresh operator credentials for this run; never printed.
IDEMGATE_OPS_USER=ops-browser
IDEMGATE_OPS_PASSWORD=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export IDEMGATE_OPS_USER IDEMGATE_OPS_PASSWORD
secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')

IDEMGATE_API_ADDR=127.0.0.1:0 IDEMGATE_WAIT=200ms \
	start api "$tmp/bin/api"
addr=""
for _ in $(seq 1 600); do
	alive api || die "the api exited during start"
	addr=$(log_field api "api listening" addr)
	[[ -n "$addr" ]] && break
	sleep 0.1
done
[[ -n "$addr" ]] || die "the api did not log its address within 60s"
export IDEMGATE_URL="http://$addr"
ready=0
for _ in $(seq 1 600); do
	alive api || die "the api exited during start"
	if curl -fsS -o /dev/null --max-time 2 "$IDEMGATE_URL/readyz" 2>/dev/null; then
		ready=1
		break
	fi
	sleep 0.1
done
((ready)) || die "$IDEMGATE_URL/readyz did not answer 200 within 60s"
log "api ready at $IDEMGATE_URL"

STRIPE_API_KEY=sk_test_browser STRIPE_API_BASE=$TESTSTRIPE_URL IDEMGATE_SECRET=$secret \
	SMTP_ADDR=$MAILPIT_SMTP_ADDR IDEMGATE_RESET_LINK_BASE=$IDEMGATE_URL/reset-password \
	IDEMGATE_API_ADDR=$addr IDEMGATE_WORKER_ADDR=127.0.0.1:0 IDEMGATE_REAPER_INTERVAL=1s \
	start worker "$tmp/bin/worker"
started=0
for _ in $(seq 1 600); do
	alive worker || die "the worker exited during start"
	if [[ -n $(log_field worker "River client started" client_id) ]]; then
		started=1
		break
	fi
	sleep 0.1
done
((started)) || die "the worker's River client did not start within 60s"
log "worker started"

# ---------------------------------------------------------------------------
# 6. the browser test
# ---------------------------------------------------------------------------
installed="$browser_dir/node_modules/.package-lock.json"
if [[ ! -f "$installed" || "$browser_dir/package-lock.json" -nt "$installed" || "$browser_dir/package.json" -nt "$installed" ]]; then
	log "npm ci in e2e/browser"
	(cd "$browser_dir" && npm ci --no-audit --no-fund >&2)
fi

log "node --test"
node --test --test-reporter=spec "$@" "$browser_dir"/*.test.mjs

# Credentials are never logged.
for name in api worker; do
	if grep -qF -- "$IDEMGATE_OPS_PASSWORD" "$tmp/$name.log" "$tmp/$name.out"; then
		die "the $name logged the operator password"
	fi
done
