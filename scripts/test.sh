#!/usr/bin/env bash
# scripts/test.sh: the one test command. Runs from any directory.
#
#   scripts/test.sh                      everything: gofmt, go vet, go test -race
#   scripts/test.sh -run Foo             extra arguments go to `go test` after
#                                        -race -count=1
#   PKGS='./internal/migrations/... ./internal/...' scripts/test.sh -run Migrat
#                                        restrict vet and tests to packages
#   scripts/test.sh -run Migrat ./internal/migrations/...
#                                        arguments starting with ./ or ../ are
#                                        taken as the package list instead of PKGS
#   scripts/test.sh --stress N [args]    the Go suite (go test -race -count=1)
#                                        N times in a row while one busy loop per
#                                        core hogs the CPU; stops at the first
#                                        failure. No e2e, browser, chaos or
#                                        quickstart steps.
#   TEST_HOG=1 scripts/test.sh           any run, with the same CPU hogs
#
#   scripts/test.sh -h | --help          this help; starts nothing
#
# Postgres: TEST_DATABASE_URL if set; else the server on 127.0.0.1:5432; else a
# throwaway cluster started from /usr/lib/postgresql/*/bin and removed on exit.
# The chosen URL is exported as TEST_DATABASE_URL for the tests
# (internal/pgtest reads it). The server may be small and shared: each pool on
# a test database is capped at TEST_DB_MAX_CONNS connections (set from the
# connections the server has free when unset), and the peak of the server's
# client connections during the run is reported at the end.
#
# Every step runs even when an earlier one failed (only the set-up steps,
# Postgres and the services, stop the run); the end lists each step's verdict
# and wall time and the run's total, and the exit status is non-zero when any
# step failed.
#
# What a run makes, it removes: everything it and its tests write to a
# temporary directory (built binaries, SQLite templates, logs) is under one
# directory of its own, exported as TMPDIR and removed on exit; its test
# databases are dropped; the migrated template databases (idemgate_tpl_*)
# are dropped at the end, and those of earlier runs at the start, when no
# other run uses the server (see drop_templates).
#
# Environment: E2E=auto|1|0 and CHAOS=auto|1|0 (end-to-end, browser,
# quickstart and example steps; chaos steps: auto runs them on whole-repo
# runs), PKGS, TEST_HOG=1, TEST_DATABASE_URL, TEST_DB_MAX_CONNS.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^set -euo pipefail/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
	exit 0
fi

started=$SECONDS
step="setup"
pg_tmp=""       # throwaway cluster directory, if we started one
hog_pids=()     # CPU hogs of --stress and TEST_HOG=1
verdicts=()     # "step: PASS|FAIL (Ns)" of every step run, in order
failed=0        # how many steps failed
sampler_pid=""  # the pg_stat_activity sampler
sampler_out=""  # its file: the highest count seen
timings=()      # "what: Ns" of the set-up and of every step, in order
run_lock_fd=""  # the write end of the session that holds the run lock

# Everything the run and its tests put in a temporary directory (go test's
# built binaries, internal/app's api and worker builds, SQLite templates,
# the scripts' mktemp directories) goes under one directory of this run,
# removed on exit. 0755: the Postgres clusters of the failover test and of a
# throwaway server run as the postgres user below it.
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-test.XXXXXX")
chmod 0755 "$run_tmp"
export TMPDIR=$run_tmp

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
	wait "${hog_pids[@]}" 2>/dev/null || true # a killed hog's status is 143: not a failure
	hog_pids=()
}

# run_step NAME FUNCTION [ARGS]: runs FUNCTION in a subshell with set -e,
# records NAME's verdict and goes on whatever it returned.
run_step() {
	local name=$1 rc t0=$SECONDS
	shift
	step=$name
	log "step '$name': start"
	set +e
	(
		set -e
		"$@"
	)
	rc=$?
	set -e
	timings+=("$name: $((SECONDS - t0))s")
	if ((rc == 0)); then
		verdicts+=("$name: PASS ($((SECONDS - t0))s)")
	else
		verdicts+=("$name: FAIL, exit $rc ($((SECONDS - t0))s)")
		failed=$((failed + 1))
		log "step '$name' FAILED (exit $rc); going on with the next steps"
	fi
	return 0
}

# sampler_start samples the server's client connections (pg_stat_activity,
# client backends, the sampler's own excluded) every half second and keeps
# the highest count in $sampler_out; sampler_stop ends it.
sampler_start() {
	command -v psql >/dev/null || return 0
	sampler_out=$(mktemp "${TMPDIR:-/tmp}/idemgate-test-peak.XXXXXX")
	echo 0 >"$sampler_out"
	(
		peak=0
		while :; do
			n=$(psql "$TEST_DATABASE_URL" -XAtq -c "SELECT count(*) - 1 FROM pg_stat_activity WHERE backend_type = 'client backend'" 2>/dev/null || true)
			if [[ $n =~ ^[0-9]+$ ]] && ((n > peak)); then
				peak=$n
				echo "$peak" >"$sampler_out"
			fi
			sleep 0.5
		done
	) &
	sampler_pid=$!
}
sampler_stop() {
	[[ -n $sampler_pid ]] || return 0
	kill "$sampler_pid" 2>/dev/null
	wait "$sampler_pid" 2>/dev/null
	sampler_pid=""
}

# kill_tree PID: ends PID and every process it started, children first.
kill_tree() {
	local child
	for child in $(pgrep -P "$1" 2>/dev/null); do
		kill_tree "$child"
	done
	kill "$1" 2>/dev/null
}

cleanup() {
	local rc=$?
	set +e
	# Lanes still running (the run was interrupted) end with it.
	[[ -n ${lanes_pid:-} ]] && kill_tree "$lanes_pid"
	sampler_stop
	hog_stop
	# Services (stripe-mock, Mailpit) stop here.
	declare -F services_stop >/dev/null && services_stop
	run_lock_release
	if [[ -n "$pg_tmp" ]]; then
		pgcluster_stop immediate
		rm -rf "$pg_tmp"
	fi
	if ((${#verdicts[@]})); then
		log "verdicts:"
		printf '  %s\n' "${verdicts[@]}" >&2
	fi
	if ((${#timings[@]})); then
		log "timing (wall clock):"
		printf '  %s\n' "${timings[@]}" "total: $((SECONDS - started))s" >&2
	fi
	if [[ -n $sampler_out && -f $sampler_out ]]; then
		log "peak client connections on the test server during the run: $(cat "$sampler_out") (of max_connections ${pg_max_conns:-?}; ${pg_baseline:-?} were open when the run began; TEST_DB_MAX_CONNS=${TEST_DB_MAX_CONNS:-?})"
		rm -f "$sampler_out"
	fi
	rm -rf "$run_tmp"
	if ((rc == 0 && failed > 0)); then
		rc=1
	fi
	if [[ $rc -eq 0 ]]; then
		log "OK: every step passed in $((SECONDS - started))s"
	elif ((failed > 0)); then
		log "FAILED: $failed step(s) failed (see the verdicts above), after $((SECONDS - started))s"
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
run_started_epoch=$(date +%s)

# The server may be shared and small: read what it has free, and cap every
# pool on a test database (internal/pgtest) so that the suite fits. A test
# database's pools (the test's, an api's, a worker's) use a few times the
# cap; go test runs about two such tests per core at once.
pg_max_conns="" pg_baseline=""
if command -v psql >/dev/null; then
	pg_max_conns=$(psql "$TEST_DATABASE_URL" -XAtq -c "SHOW max_connections" 2>/dev/null || true)
	pg_baseline=$(psql "$TEST_DATABASE_URL" -XAtq -c "SELECT count(*) - 1 FROM pg_stat_activity WHERE backend_type = 'client backend'" 2>/dev/null || true)
fi
if [[ -z ${TEST_DB_MAX_CONNS:-} ]]; then
	TEST_DB_MAX_CONNS=8
	if [[ $pg_max_conns =~ ^[0-9]+$ && $pg_baseline =~ ^[0-9]+$ ]]; then
		free=$((pg_max_conns - pg_baseline))
		TEST_DB_MAX_CONNS=$((free / 10))
		((TEST_DB_MAX_CONNS <= 8)) || TEST_DB_MAX_CONNS=8
		((TEST_DB_MAX_CONNS >= 2)) || TEST_DB_MAX_CONNS=2
	fi
fi
export TEST_DB_MAX_CONNS
# A test that would skip itself for a missing tool (the failover test without
# initdb or a postgres user) fails instead: the full suite runs every test.
export IDEMGATE_TEST_FULL=1
log "test server: max_connections ${pg_max_conns:-?}, ${pg_baseline:-?} client connections open; pools on test databases capped at TEST_DB_MAX_CONNS=$TEST_DB_MAX_CONNS"
sampler_start

# ---------------------------------------------------------------------------
# (b) Drop test databases that killed test processes left behind: named
# idemgate_t_<unix seconds>_<hex> by internal/pgtest and the quickstart step
# (idemgate_e2e_, idemgate_browser_ and idemgate_example_ likewise by the e2e,
# browser and example steps),
# created before SINCE, nobody connected. At the start SINCE is 30 minutes ago
# (longer than any test holds a database, so a concurrent run's are safe); at
# the end it is this run's start, and what is left of this run is a failure.
# ---------------------------------------------------------------------------
# sweep_leftovers MIN_EPOCH MAX_EPOCH: drops the unconnected test databases
# created in [MIN_EPOCH, MAX_EPOCH) and prints how many it dropped.
sweep_leftovers() {
	local leftovers db n=0
	leftovers=$(psql "$TEST_DATABASE_URL" -XAtq -v ON_ERROR_STOP=1 -c "
		SELECT d.datname FROM pg_database d
		WHERE d.datname ~ '^idemgate_(t|e2e|browser|example)_[0-9]+_[0-9a-f]+\$'
		  AND split_part(d.datname, '_', 3)::bigint >= $1
		  AND split_part(d.datname, '_', 3)::bigint < $2
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)" 2>/dev/null || true)
	for db in $leftovers; do
		if psql "$TEST_DATABASE_URL" -XAtq -c "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1; then
			n=$((n + 1))
		fi
	done
	echo "$n"
}
step="sweep"
if command -v psql >/dev/null; then
	n=$(sweep_leftovers 0 $((run_started_epoch - 1800)))
	((n == 0)) || log "dropped $n leftover test database(s) of earlier runs"
else
	log "psql not installed: skipping the sweep of leftover test databases"
fi

# ---------------------------------------------------------------------------
# (b2) The template databases (idemgate_tpl_<migrations fingerprint>, built
# by internal/pgtest's first NewDB under its template lock, copied by every
# NewDB). Every run holds the run lock shared for its whole length; a run
# that gets it exclusively is the only scripts/test.sh on the server.
# ---------------------------------------------------------------------------
run_lock_key=$((0x1de36a7e00000003)) # beside pgengine's 0x…01 and pgtest's 0x…02

# run_lock_take holds the run lock shared in a psql session of its own, idle
# until the script ends: its input is this script's, so the session (and
# the lock) ends when the script does, even when it is killed.
run_lock_take() {
	command -v psql >/dev/null || return 0
	local ans=""
	coproc RUN_LOCK { exec psql "$TEST_DATABASE_URL" -XAtq -v ON_ERROR_STOP=1 2>/dev/null; }
	run_lock_fd=${RUN_LOCK[1]}
	echo "SELECT 'held' FROM pg_advisory_lock_shared($run_lock_key);" >&"$run_lock_fd"
	if ! read -r -t 120 ans <&"${RUN_LOCK[0]}" || [[ $ans != held ]]; then
		log "could not take the run lock (another run dropping templates for 2 minutes?); going on without it"
	fi
}
run_lock_release() {
	[[ -n $run_lock_fd ]] || return 0
	eval "exec $run_lock_fd>&-"
	run_lock_fd=""
	wait "$RUN_LOCK_PID" 2>/dev/null || true
}

# drop_templates WHEN drops every template database, when nothing could be
# using one: this run gets the run lock exclusively (no other scripts/test.sh
# runs), nobody is connected to an idemgate_* database (no one's go test,
# quickstart or e2e run is under way) and nobody holds internal/pgtest's
# template lock (0x1de36a7e_00000002: no template is being built).
# Otherwise it keeps them and says why. A template is only a cache: the
# first test of the next run builds it again, in seconds.
drop_templates() {
	command -v psql >/dev/null || return 0
	local out
	if ! out=$(psql "$TEST_DATABASE_URL" -XAtq -v ON_ERROR_STOP=1 2>&1 <<SQL
SELECT pg_try_advisory_lock($run_lock_key) AS alone \gset
\if :alone
SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname LIKE 'idemgate\_%')
   AND NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
                   AND classid = $((0x1de36a7e)) AND objid = 2 AND objsubid = 1) AS idle \gset
\if :idle
SELECT 'dropped ' || datname FROM pg_database WHERE datname LIKE 'idemgate\_tpl\_%' ORDER BY 1;
SELECT format('ALTER DATABASE %I IS_TEMPLATE false', datname), format('DROP DATABASE %I', datname)
  FROM pg_database WHERE datname LIKE 'idemgate\_tpl\_%' \gexec
\else
\echo kept: an idemgate_ database is in use (a go test, quickstart or e2e run is under way)
\endif
\else
\echo kept: another scripts/test.sh run holds the run lock
\endif
SQL
	); then
		log "template databases ($1): dropping failed: $out"
		return 0
	fi
	if [[ -z $out ]]; then
		return 0
	elif [[ $out == kept:* ]]; then
		log "template databases ($1): ${out#kept: }; kept"
	else
		log "template databases ($1): ${out//$'\n'/, }"
	fi
}
drop_templates "left by earlier runs"
run_lock_take

# ---------------------------------------------------------------------------
# Services: stripe-mock, Mailpit, node (MCP TypeScript client) and the like.
# Start them here, export their addresses for the tests, and stop them in
# cleanup() above.
# ---------------------------------------------------------------------------
step="services"
source scripts/services.sh # stripe-mock and Mailpit; the cwd is the repo root (cd above)
services_start
timings+=("set-up (Postgres, sweep, services): $((SECONDS - started))s")

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
# The steps. Each is a function run by run_step: a failure is recorded and the
# next step runs.
# ---------------------------------------------------------------------------

# (c) gofmt, over every Go file of the repo
step_gofmt() {
	local unformatted
	unformatted=$(find . -type f -name '*.go' \
		-not -path './.git/*' -not -path '*/node_modules/*' -not -path './.tmp/*' -print0 |
		xargs -0 -r gofmt -l)
	if [[ -n "$unformatted" ]]; then
		log "gofmt -l lists files that need formatting (run gofmt -w on them):"
		mapfile -t unformatted_files <<<"$unformatted"
		printf '  %s\n' "${unformatted_files[@]}" >&2
		return 1
	fi
}

# (c2) docker-compose.yml must stay valid for users with Docker. No engine
# runs here: `config -q` only parses and validates the file. Compose v2 (the
# docker plugin) when present, else Compose v1 (Debian's docker-compose,
# installed here when missing and apt-get is usable). The file requires a
# secret of the user's (no default ships); validate it with a throwaway one.
step_compose() {
	local compose_secret compose_cmd ignored
	compose_secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
	if docker compose version >/dev/null 2>&1; then
		compose_cmd=(docker compose)
	else
		if ! command -v docker-compose >/dev/null; then
			if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
				log "installing docker-compose (Debian) to validate docker-compose.yml"
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
			else
				log "neither 'docker compose' nor 'docker-compose' is installed: install one to validate docker-compose.yml"
				return 1
			fi
		fi
		compose_cmd=(docker-compose)
	fi
	IDEMGATE_SECRET=$compose_secret "${compose_cmd[@]}" config -q
	# No secret ships with it: without one, Compose refuses to start.
	if env -u IDEMGATE_SECRET "${compose_cmd[@]}" config -q >/dev/null 2>&1; then
		log "docker-compose.yml starts without IDEMGATE_SECRET: it must require one"
		return 1
	fi
	# The build context must not carry the history or the dev state (.tmp/
	# holds the quickstart's secret and databases).
	for ignored in .git .tmp '**/node_modules' '*.db'; do
		if ! grep -qxF -- "$ignored" .dockerignore; then
			log ".dockerignore does not list $ignored: docker build would send it to the daemon"
			return 1
		fi
	done
}

# (c3) every script answers --help and -h with its usage, exit 0, and starts
# nothing (scripts/helpcheck.sh).
step_help() { bash scripts/helpcheck.sh; }

# (d) go vet
step_vet() {
	go vet "${pkgs[@]}"
	if ((bench_mod)); then
		(cd cmd/bench && go vet ./...)
	fi
}

# (e) go test
run_go_tests() {
	if ((arg_pkgs)); then
		go test -race -count=1 "$@"
	else
		go test -race -count=1 "$@" "${pkgs[@]}"
	fi
}
step_go_test() { run_go_tests "$@"; }
step_bench_test() { (cd cmd/bench && go test -race -count=1 "$@" ./...); }

# (h) The quickstart, as a new user runs it: DEV_SMOKE=1 scripts/dev.sh on a
# fresh state directory and free ports (api, Mailpit's SMTP and web UI), then
# the same with --postgres on a fresh database of the Postgres chosen above
# (named like internal/pgtest's, so that the sweep (b) drops it if a killed
# run leaves it behind). Each makes a refund with its printed curl line,
# replays it, runs its printed idemctl line and checks Mailpit (and River UI
# on Postgres).
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
step_quickstart_postgres() {
	local smoke_db rc=0
	smoke_db="idemgate_t_$(date +%s)_$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
	log "quickstart on Postgres: DEV_SMOKE=1 scripts/dev.sh --postgres (database $smoke_db)"
	DEV_POSTGRES_URL=$TEST_DATABASE_URL DEV_DATABASE=$smoke_db DEV_POOL_MAX_CONNS=$TEST_DB_MAX_CONNS dev_smoke --postgres || rc=$?
	psql "$TEST_DATABASE_URL" -XAtq -c "DROP DATABASE IF EXISTS \"$smoke_db\" WITH (FORCE)" >/dev/null
	return "$rc"
}

# (j) nothing this run created is left: every test database is dropped by its
# test, pass or fail.
step_leftovers() {
	command -v psql >/dev/null || return 0
	local n
	n=$(sweep_leftovers "$run_started_epoch" $(($(date +%s) + 1)))
	if ((n > 0)); then
		log "$n test database(s) of this run were left behind (dropped now)"
		return 1
	fi
}

if ((stress)); then
	step="go test (stress build)"
	go test -race -count=1 -run '^$' "${pkgs[@]}" >/dev/null # build once, unhogged
	hog_start
	for ((run = 1; run <= stress; run++)); do
		step="go test (stress run $run of $stress)"
		run_started=$SECONDS
		run_go_tests "$@"
		log "stress run $run of $stress passed in $((SECONDS - run_started))s"
	done
	hog_stop
	run_lock_release
	drop_templates "this run's"
	step="done"
	exit 0
fi

run_step gofmt step_gofmt
run_step compose step_compose
run_step "script --help" step_help
# The end-to-end steps start processes and mostly wait on them: they run
# in lanes, side by side and beside go vet and the Go tests, each lane's
# steps one after the other, its output kept in a log of its own and
# printed once the Go tests are done (so the run's output stays
# readable); each step still gets its verdict and its time. A build step
# first puts the binaries the lanes build into Go's cache, so that they do
# not compile the same packages side by side.
#
# (f) MCP end-to-end tests with the official TypeScript SDK: e2e/run.sh.
# (f2) River UI in a real browser: e2e/browser/run.sh installs Debian's
# Chromium when it is missing, builds once, and on each engine starts the
# api, the worker (on SQLite, inside the api) and the test Stripe on a fresh
# database and retries a failed refund's job in River UI with
# playwright-core.
# (f3) The official MCP conformance suite (0.1.16 and the 0.2.0 alpha, on
# the pinned Node 22 it installs into .tmp/conformance/) against the api on
# a fresh database (idemgate_e2e_*, through e2e/run.sh --exec), behind a
# token-adding proxy: scripts/conformance.sh. Fails on any failure that
# e2e/conformance/expected-failures*.yml does not list and on a listed one
# that passes.
# Gating of (f)-(f3), (h) and (i): E2E=auto/1/0.
#
# (g) Chaos: scripts/chaos.sh --short runs its own Postgres, test Stripe,
# Mailpit, two api replicas and three workers killed with SIGKILL, and counts
# effects; then the same through a PgBouncer in transaction pooling mode
# (--pgbouncer: installed with apt-get when missing, started by the script).
# CHAOS=auto (default) runs it when the whole repo is tested (no arguments,
# PKGS unset); CHAOS=1 always; CHAOS=0 never.
#
# (h) quickstart, (i) the example service (examples/coupon), as a team would
# run its own: built, started on a fresh SQLite file and a fresh Postgres
# database, and called. (h2) the README's runnable blocks, each run as
# written against a fresh quickstart (scripts/dev.sh on free ports and a
# fresh DEV_DIR), twice in a row, as a newcomer runs a block again.
chaos_run=0
case ${CHAOS:-auto} in
0) log "CHAOS=0: not running the chaos step (scripts/chaos.sh --short)" ;;
1) chaos_run=1 ;;
*)
	if (($# == 0)) && [[ -z "${PKGS:-}" ]]; then
		chaos_run=1
	else
		log "arguments or PKGS restrict this run: not running the chaos step (CHAOS=1 runs it)"
	fi
	;;
esac

# lane_step FILE NAME FUNCTION [ARGS]: run_step for a lane (a background
# subshell): runs FUNCTION with set -e and appends NAME, its exit status
# and its seconds to FILE, whatever it returned.
lane_step() {
	local file=$1 name=$2 rc t0=$SECONDS
	shift 2
	log "step '$name': start"
	set +e
	(
		set -e
		"$@"
	)
	rc=$?
	set -e
	printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$file"
	log "step '$name': exit $rc after $((SECONDS - t0))s"
	return 0
}

lane_browser() {
	lane_step "$1" "e2e browser" bash e2e/browser/run.sh postgres sqlite
	lane_step "$1" example bash scripts/example.sh
}
lane_mcp() {
	lane_step "$1" e2e bash e2e/run.sh
	lane_step "$1" conformance bash scripts/conformance.sh
	lane_step "$1" quickstart dev_smoke
	lane_step "$1" "quickstart on Postgres" step_quickstart_postgres
	lane_step "$1" "README blocks" env README_RUNS=2 bash scripts/readme.sh
}
lane_chaos() {
	lane_step "$1" chaos bash scripts/chaos.sh --short
	lane_step "$1" "chaos pgbouncer" bash scripts/chaos.sh --short --pgbouncer
}

# lanes_start LANE...: in the background, the build step and then every
# lane side by side, each with its results file and its log in a
# directory of this run; the Go tests run meanwhile. lanes_finish waits
# for them, prints each log and records the steps' verdicts and times in
# order.
lanes_dir="" lanes_pid="" lanes_t0=0
lanes_start() {
	local lane
	lanes_dir=$(mktemp -d "$run_tmp/lanes.XXXXXX")
	printf '%s\n' build "$@" >"$lanes_dir/order"
	(
		lane_step "$lanes_dir/build.res" "build (for the lanes)" step_build >"$lanes_dir/build.log" 2>&1
		for lane in "$@"; do
			("$lane" "$lanes_dir/$lane.res") >"$lanes_dir/$lane.log" 2>&1 &
		done
		wait
	) &
	lanes_pid=$!
	lanes_t0=$SECONDS
	log "lanes ($*): started in the background (pid $lanes_pid, logs in $lanes_dir); their output follows the Go tests'"
}
lanes_finish() {
	local part name rc secs
	[[ -n $lanes_pid ]] || return 0
	step="lanes"
	wait "$lanes_pid" || true
	while read -r part; do
		log "---- $part: its output ----"
		cat "$lanes_dir/$part.log" >&2 2>/dev/null || true
		log "---- $part: end ----"
		[[ -f $lanes_dir/$part.res ]] || continue
		while IFS=$'\t' read -r name rc secs; do
			timings+=("$name: ${secs}s ($part)")
			if ((rc == 0)); then
				verdicts+=("$name: PASS (${secs}s)")
			else
				verdicts+=("$name: FAIL, exit $rc (${secs}s)")
				failed=$((failed + 1))
			fi
		done <"$lanes_dir/$part.res"
	done <"$lanes_dir/order"
	timings+=("the lanes, beside go vet and the Go tests: $((SECONDS - lanes_t0))s")
	lanes_pid=""
}

step_build() {
	go build ./cmd/... ./internal/stripetest/cmd/... ./e2e/goclient ./examples/...
}

lanes=()
if ((e2e_run)); then
	lanes+=(lane_browser lane_mcp)
fi
if ((chaos_run)); then
	lanes+=(lane_chaos)
fi
if ((${#lanes[@]})); then
	lanes_start "${lanes[@]}"
fi
run_step "go vet" step_vet
[[ ${TEST_HOG:-0} == 1 ]] && hog_start
run_step "go test" step_go_test "$@"
if ((bench_mod)); then
	run_step "go test (cmd/bench module)" step_bench_test "$@"
fi
lanes_finish
run_step "no test database left" step_leftovers
run_lock_release
drop_templates "this run's"
step="done"
