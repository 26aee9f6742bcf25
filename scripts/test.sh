#!/usr/bin/env bash
# scripts/test.sh: the one test command. Runs from any directory.
#
#   scripts/test.sh                      everything: gofmt, go vet, go test -race
#   scripts/test.sh -run Foo             extra arguments go to `go test` after
#                                        -race -count=1
#   PKGS='./migrations/... ./internal/...' scripts/test.sh -run Migrat
#                                        restrict vet and tests to packages
#   scripts/test.sh -run Migrat ./migrations/...
#                                        arguments starting with ./ or ../ are
#                                        taken as the package list instead of PKGS
#   scripts/test.sh --stress N [args]    the Go suite (go test -race -count=1)
#                                        N times in a row while one busy loop per
#                                        core hogs the CPU; stops at the first
#                                        failure. No e2e, browser, chaos or
#                                        quickstart steps.
#   TEST_HOG=1 scripts/test.sh           any run, with the same CPU hogs
#
# Postgres: TEST_DATABASE_URL if set; else the server on 127.0.0.1:5432; else a
# throwaway cluster started from /usr/lib/postgresql/*/bin and removed on exit.
# The chosen URL is exported as TEST_DATABASE_URL for the tests
# (internal/pgtest reads it).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=$SECONDS
step="setup"
pg_tmp=""       # throwaway cluster directory, if we started one
hog_pids=()     # CPU hogs of --stress and TEST_HOG=1

stress=0
if [[ ${1:-} == --stress ]]; then
	stress=${2:-}
	if ! [[ $stress =~ ^[1-9][0-9]*$ ]]; then
		printf 'test.sh: --stress needs a positive count of runs, got %q\n' "$stress" >&2
		exit 2
	fi
	shift 2
fi

log() { printf 'test.sh: %s\n' "$*" >&2; }
source scripts/pgcluster.sh # a throwaway cluster when no server is reachable

# hog_start starts one busy loop per core, so that the tests meet a machine
# as loaded as a busy CI runner; hog_stop (also run on exit) ends them.
hog_start() {
	local n
	n=$(nproc 2>/dev/null || echo 2)
	for ((i = 0; i < n; i++)); do
		bash -c 'while :; do :; done' &
		hog_pids+=($!)
	done
	log "CPU hogs: ${#hog_pids[@]} busy loops (pids ${hog_pids[*]})"
}
hog_stop() {
	((${#hog_pids[@]} == 0)) && return 0
	kill "${hog_pids[@]}" 2>/dev/null
	wait "${hog_pids[@]}" 2>/dev/null
	hog_pids=()
}

cleanup() {
	local rc=$?
	set +e
	hog_stop
	# Services (stripe-mock, Mailpit) stop here.
	declare -F services_stop >/dev/null && services_stop
	if [[ -n "$pg_tmp" ]]; then
		pgcluster_stop immediate
		rm -rf "$pg_tmp"
	fi
	if [[ $rc -eq 0 ]]; then
		log "OK: every step passed (gofmt, compose, vet, go test -race, and on full runs e2e, browser, chaos, quickstart, example) in $((SECONDS - started))s"
	else
		log "FAILED at step '$step' (exit $rc) after $((SECONDS - started))s"
	fi
	exit "$rc"
}
trap cleanup EXIT

# redact hides a password in a URL for messages.
redact() { sed -E 's#(://[^:/@]+):[^@]*@#\1:xxxxx@#' <<<"$1"; }

# port_open HOST PORT: does anything accept TCP connections there?
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# ---------------------------------------------------------------------------
# (a) Postgres
# ---------------------------------------------------------------------------
step="postgres"
default_url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

start_throwaway_postgres() {
	pg_tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-pg.XXXXXX")
	if ! pgcluster_start "$pg_tmp" "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"; then
		log "no Postgres: TEST_DATABASE_URL is unset and nothing listens on 127.0.0.1:5432;"
		log "install Postgres (apt-get install postgresql) or set TEST_DATABASE_URL."
		exit 1
	fi
	TEST_DATABASE_URL=$pg_url
}

if [[ -n "${TEST_DATABASE_URL:-}" ]]; then
	log "Postgres from TEST_DATABASE_URL: $(redact "$TEST_DATABASE_URL")"
	if command -v pg_isready >/dev/null && ! pg_isready -q -d "$TEST_DATABASE_URL"; then
		log "TEST_DATABASE_URL ($(redact "$TEST_DATABASE_URL")) does not accept connections"
		exit 1
	fi
elif { command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432; } ||
	{ ! command -v pg_isready >/dev/null && port_open 127.0.0.1 5432; }; then
	TEST_DATABASE_URL=$default_url
	log "Postgres on 127.0.0.1:5432"
else
	start_throwaway_postgres
fi
export TEST_DATABASE_URL

# ---------------------------------------------------------------------------
# (b) Drop test databases that killed test processes left behind: named
# idemgate_t_<unix seconds>_<hex> by internal/pgtest, older than an hour (so a
# concurrent run's fresh databases are safe), nobody connected.
# ---------------------------------------------------------------------------
step="sweep"
if command -v psql >/dev/null; then
	leftovers=$(psql "$TEST_DATABASE_URL" -XAtq -v ON_ERROR_STOP=1 -c "
		SELECT d.datname FROM pg_database d
		WHERE d.datname ~ '^idemgate_t_[0-9]+_[0-9a-f]+\$'
		  AND split_part(d.datname, '_', 3)::bigint < extract(epoch FROM now()) - 3600
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)" 2>/dev/null || true)
	n=0
	for db in $leftovers; do
		if psql "$TEST_DATABASE_URL" -XAtq -c "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1; then
			n=$((n + 1))
		fi
	done
	((n == 0)) || log "dropped $n leftover test database(s)"
else
	log "psql not installed: skipping the sweep of leftover test databases"
fi

# ---------------------------------------------------------------------------
# Services: stripe-mock, Mailpit, node (MCP TypeScript client) and the like.
# Start them here, export their addresses for the tests, and stop them in
# cleanup() above.
# ---------------------------------------------------------------------------
step="services"
source scripts/services.sh # stripe-mock and Mailpit; the cwd is the repo root (cd above)
services_start

# MCP end-to-end tests: e2e/run.sh drives a real api on a fresh database with
# the official MCP TypeScript SDK (node). They run as step (f), after the Go
# tests passed, on the Postgres chosen above. E2E=auto (default) runs them when the whole repo is tested (no
# arguments, PKGS unset); E2E=1 always; E2E=0 never. When they are to run,
# node and npm are required: their absence fails here, before the Go tests.
e2e_run=0
case ${E2E:-auto} in
1) e2e_run=1 ;;
0) log "E2E=0: not running the MCP end-to-end tests (e2e/run.sh)" ;;
auto)
	if ((stress)); then
		log "--stress: not running the MCP end-to-end tests"
	elif (($# == 0)) && [[ -z "${PKGS:-}" ]]; then
		e2e_run=1
	else
		log "arguments or PKGS restrict this run: not running the MCP end-to-end tests (E2E=1 runs them)"
	fi
	;;
*)
	log "E2E must be auto, 1 or 0; got '$E2E'"
	exit 2
	;;
esac
if ((e2e_run)); then
	for tool in node npm; do
		if ! command -v "$tool" >/dev/null; then
			log "$tool is not installed, and the MCP end-to-end tests (e2e/run.sh) need it:"
			log "install Node.js 20 or newer with npm (https://nodejs.org/, or apt-get install nodejs npm),"
			log "or set E2E=0 to run the Go tests only."
			exit 1
		fi
	done
	if (($(node -p 'process.versions.node.split(".")[0]') < 20)); then
		log "node $(node --version) is too old for the MCP end-to-end tests: install Node.js 20 or newer, or set E2E=0"
		exit 1
	fi
fi

# ---------------------------------------------------------------------------
# Package list: arguments that start with ./ or ../ replace PKGS.
# ---------------------------------------------------------------------------
pkgs=()
arg_pkgs=0
for a in "$@"; do
	if [[ $a == ./* || $a == ../* || $a == . ]]; then
		pkgs+=("$a")
		arg_pkgs=1
	fi
done
if ((arg_pkgs == 0)); then
	read -r -a pkgs <<<"${PKGS:-./...}"
fi
# cmd/bench is a Go module of its own, which ./... does not reach: runs of the
# whole repo (no package arguments, PKGS unset) vet and test it from its
# directory too.
bench_mod=0
if ((arg_pkgs == 0)) && [[ -z "${PKGS:-}" ]]; then
	bench_mod=1
fi

# ---------------------------------------------------------------------------
# (c) gofmt, over every Go file of the repo
# ---------------------------------------------------------------------------
step="gofmt"
unformatted=$(find . -type f -name '*.go' \
	-not -path './.git/*' -not -path '*/node_modules/*' -not -path './.tmp/*' -print0 |
	xargs -0 -r gofmt -l)
if [[ -n "$unformatted" ]]; then
	log "gofmt -l lists files that need formatting (run gofmt -w on them):"
	mapfile -t unformatted_files <<<"$unformatted"
	printf '  %s\n' "${unformatted_files[@]}" >&2
	exit 1
fi

# ---------------------------------------------------------------------------
# (c2) docker-compose.yml
# ---------------------------------------------------------------------------
step="compose"
# docker-compose.yml must stay valid for users with Docker. No engine runs
# here: `config -q` only parses and validates the file. Compose v2 (the
# docker plugin) when present, else Compose v1 (Debian's docker-compose,
# installed here when missing and apt-get is usable).
# The file requires a secret of the user's (no default ships); validate it
# with a throwaway one.
compose_secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
if docker compose version >/dev/null 2>&1; then
	IDEMGATE_SECRET=$compose_secret docker compose config -q
else
	if ! command -v docker-compose >/dev/null; then
		if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
			log "installing docker-compose (Debian) to validate docker-compose.yml"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
		else
			log "neither 'docker compose' nor 'docker-compose' is installed: install one to validate docker-compose.yml"
			exit 1
		fi
	fi
	IDEMGATE_SECRET=$compose_secret docker-compose config -q
fi
# No secret ships with it: without one, Compose refuses to start.
if docker compose version >/dev/null 2>&1; then
	compose_cmd=(docker compose)
else
	compose_cmd=(docker-compose)
fi
if env -u IDEMGATE_SECRET "${compose_cmd[@]}" config -q >/dev/null 2>&1; then
	log "docker-compose.yml starts without IDEMGATE_SECRET: it must require one"
	exit 1
fi
# The build context must not carry the history or the dev state (.tmp/ holds
# the quickstart's secret and databases).
for ignored in .git .tmp '**/node_modules' '*.db'; do
	if ! grep -qxF -- "$ignored" .dockerignore; then
		log ".dockerignore does not list $ignored: docker build would send it to the daemon"
		exit 1
	fi
done

# ---------------------------------------------------------------------------
# (d) go vet
# ---------------------------------------------------------------------------
step="go vet"
go vet "${pkgs[@]}"
if ((bench_mod)); then
	(cd cmd/bench && go vet ./...)
fi

# ---------------------------------------------------------------------------
# (e) go test
# ---------------------------------------------------------------------------
step="go test"
run_go_tests() {
	if ((arg_pkgs)); then
		go test -race -count=1 "$@"
	else
		go test -race -count=1 "$@" "${pkgs[@]}"
	fi
}
if ((stress)); then
	go test -race -count=1 -run '^$' "${pkgs[@]}" >/dev/null # build once, unhogged
	hog_start
	for ((run = 1; run <= stress; run++)); do
		step="go test (stress run $run of $stress)"
		run_started=$SECONDS
		run_go_tests "$@"
		log "stress run $run of $stress passed in $((SECONDS - run_started))s"
	done
	hog_stop
	step="done"
	exit 0
fi
[[ ${TEST_HOG:-0} == 1 ]] && hog_start
run_go_tests "$@"
if ((bench_mod)); then
	step="go test (cmd/bench module)"
	(cd cmd/bench && go test -race -count=1 "$@" ./...)
fi

# ---------------------------------------------------------------------------
# (f) MCP end-to-end tests with the official TypeScript SDK
# ---------------------------------------------------------------------------
if ((e2e_run)); then
	step="e2e"
	log "MCP end-to-end tests: e2e/run.sh"
	bash e2e/run.sh
fi

# ---------------------------------------------------------------------------
# (f2) River UI in a real browser: e2e/browser/run.sh installs Debian's
# Chromium when it is missing, builds once, and on each engine starts the
# api, the worker (on SQLite, inside the api) and the test Stripe on a fresh
# database and retries a failed refund's job in River UI with
# playwright-core. Same gating as (f): E2E=auto/1/0.
# ---------------------------------------------------------------------------
if ((e2e_run)); then
	step="e2e browser"
	log "River UI browser test on Postgres and SQLite: e2e/browser/run.sh postgres sqlite"
	bash e2e/browser/run.sh postgres sqlite
fi

# ---------------------------------------------------------------------------
# (g) Chaos: scripts/chaos.sh --short runs its own Postgres, test Stripe,
# Mailpit, two api replicas and three workers killed with SIGKILL, and counts
# effects; then the same through a PgBouncer in transaction pooling mode
# (--pgbouncer: installed with apt-get when missing, started by the script).
# Same rule as e2e: CHAOS=auto (default) runs it when the whole repo is tested
# (no arguments, PKGS unset); CHAOS=1 always; CHAOS=0 never.
# ---------------------------------------------------------------------------
case ${CHAOS:-auto} in
0) log "CHAOS=0: not running the chaos step (scripts/chaos.sh --short)" ;;
1) chaos_run=1 ;;
*)
	chaos_run=0
	if (($# == 0)) && [[ -z "${PKGS:-}" ]]; then
		chaos_run=1
	else
		log "arguments or PKGS restrict this run: not running the chaos step (CHAOS=1 runs it)"
	fi
	;;
esac
if ((${chaos_run:-0})); then
	step="chaos"
	log "chaos: scripts/chaos.sh --short"
	bash scripts/chaos.sh --short
	step="chaos pgbouncer"
	log "chaos through PgBouncer: scripts/chaos.sh --short --pgbouncer"
	bash scripts/chaos.sh --short --pgbouncer
fi

# ---------------------------------------------------------------------------
# (h) The quickstart, as a new user runs it: DEV_SMOKE=1 scripts/dev.sh on a
# fresh state directory and free ports (api, Mailpit's SMTP and web UI), then
# the same with --postgres on a fresh database of the Postgres chosen above
# (named like internal/pgtest's, so that the sweep (b) drops it if a killed
# run leaves it behind). Each makes a refund with its printed curl line,
# replays it, runs its printed idemctl line and checks Mailpit (and River UI
# on Postgres). Same gating as e2e.
# ---------------------------------------------------------------------------
# dev_smoke [ARGS]: DEV_SMOKE=1 scripts/dev.sh ARGS in a fresh DEV_DIR.
dev_smoke() {
	local dir api smtp ui
	dir=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-dev.XXXXXX")
	api=$(services_free_port)
	smtp=$(services_free_port "$api")
	ui=$(services_free_port "$api" "$smtp")
	DEV_SMOKE=1 DEV_DIR="$dir" IDEMGATE_API_ADDR="127.0.0.1:$api" \
		DEV_MAILPIT_SMTP_ADDR="127.0.0.1:$smtp" DEV_MAILPIT_UI_ADDR="127.0.0.1:$ui" bash scripts/dev.sh "$@"
	rm -rf "$dir"
}
if ((e2e_run)); then
	step="quickstart"
	log "quickstart: DEV_SMOKE=1 scripts/dev.sh"
	dev_smoke
	step="quickstart on Postgres"
	smoke_db="idemgate_t_$(date +%s)_$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
	log "quickstart on Postgres: DEV_SMOKE=1 scripts/dev.sh --postgres (database $smoke_db)"
	DEV_POSTGRES_URL=$TEST_DATABASE_URL DEV_DATABASE=$smoke_db dev_smoke --postgres
	psql "$TEST_DATABASE_URL" -XAtq -c "DROP DATABASE IF EXISTS \"$smoke_db\"" >/dev/null
fi

# ---------------------------------------------------------------------------
# (i) The example service (examples/coupon), as a team would run its own:
# built, started on a fresh SQLite file and a fresh Postgres database, and
# called. Same gating as e2e.
# ---------------------------------------------------------------------------
if ((e2e_run)); then
	step="example"
	log "example service: scripts/example.sh"
	bash scripts/example.sh
fi
step="done"
