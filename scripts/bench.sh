#!/usr/bin/env bash
# scripts/bench.sh: what the gate costs, side by side with bare River and the
# database's commit limit, in one run (cmd/bench, a Go module of its own, so
# its plotting dependencies stay out of the service's go.mod). Runs from any
# directory.
#
#   scripts/bench.sh                 the full run (about 11 minutes): c=1,8,32,64,
#                                    the plain MCP server beside idemgate's,
#                                    200 lone calls per figure, 1M claims; prints
#                                    Markdown and rewrites the generated part of
#                                    docs/benchmarks.md and docs/benchmarks.svg
#   scripts/bench.sh --quick         about two minutes, for iteration: c=8,32,
#                                    1.5s windows, 40 lone calls, 50k claims;
#                                    writes nothing
#   scripts/bench.sh --profile       the run on a private throwaway Postgres with
#                                    pg_stat_statements, a CPU profile of the
#                                    harness and the top statements per figure in
#                                    .tmp/bench-profile/ (go tool pprof); writes
#                                    nothing to docs/
#   scripts/bench.sh -claims 10000000   other arguments go to cmd/bench
#                                    (cd cmd/bench && go run . -h lists them)
#
# Postgres: BENCH_DATABASE_URL if set; else TEST_DATABASE_URL; else the server
# on 127.0.0.1:5432; else a throwaway cluster started from
# /usr/lib/postgresql/*/bin (fsync on: the commit limit must be the disk's) and
# removed on exit. The URL names an admin database; its user needs CREATEDB.
# Each scenario runs on a fresh database copied from a migrated template
# (idemgate_benchtpl_<fingerprint>), dropped when it ends.
#
# The refund figures (-only stripe) need the test Stripe: STRIPE_MOCK_URL if
# set, else stripe-mock (and Mailpit) started with scripts/services.sh and
# stopped on exit; not started when -only leaves them out.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'bench.sh: %s\n' "$*" >&2; }
redact() { sed -E 's#(://[^:/@]+):[^@]*@#\1:xxxxx@#' <<<"$1"; }
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

quick=0
profile=0
args=()
for a in "$@"; do
	case $a in
	--quick) quick=1 ;;
	--profile) profile=1 ;;
	-h | --help)
		sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) args+=("$a") ;;
	esac
done

pg_tmp=""
source scripts/pgcluster.sh
source scripts/services.sh
cleanup() {
	local rc=$?
	set +e
	services_stop
	if [[ -n "$pg_tmp" ]]; then
		pgcluster_stop fast
		rm -rf "$pg_tmp"
	fi
	exit "$rc"
}
trap cleanup EXIT

# start_cluster EXTRA_OPTIONS: a throwaway Postgres on a free port, with the
# durability settings of a real server; sets url.
start_cluster() {
	pg_tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-benchpg.XXXXXX")
	pgcluster_start "$pg_tmp" "-c max_connections=200 $1" || exit 1
	url=$pg_url
}

if ((profile)); then
	start_cluster "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c track_io_timing=on -c track_wal_io_timing=on"
	"$pg_bin/psql" "$url" -XAtq -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
	mkdir -p .tmp/bench-profile
	args=(-cpuprofile .tmp/bench-profile -write=false "${args[@]}")
	log "profiling: CPU profiles and pg_stat_statements per figure go to .tmp/bench-profile/"
elif [[ -n "${BENCH_DATABASE_URL:-}" ]]; then
	url=$BENCH_DATABASE_URL
elif [[ -n "${TEST_DATABASE_URL:-}" ]]; then
	url=$TEST_DATABASE_URL
elif { command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432; } ||
	{ ! command -v pg_isready >/dev/null && port_open 127.0.0.1 5432; }; then
	url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
else
	start_cluster ""
fi
log "Postgres: $(redact "$url")"

# Drop databases that killed benchmark runs left behind: older than an hour,
# nobody connected (a concurrent run's databases are younger or in use).
if command -v psql >/dev/null; then
	leftovers=$(psql "$url" -XAtq -c "
		SELECT d.datname FROM pg_database d
		WHERE d.datname ~ '^idemgate_bench_[0-9]+_[0-9a-f]+\$'
		  AND split_part(d.datname, '_', 3)::bigint < extract(epoch FROM now()) - 3600
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)" 2>/dev/null || true)
	for db in $leftovers; do
		psql "$url" -XAtq -c "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1 && log "dropped leftover $db"
	done
fi

# The test Stripe for the refund figures, unless STRIPE_MOCK_URL names one
# or -only leaves them out.
wants_stripe=1
for ((i = 0; i < ${#args[@]}; i++)); do
	case ${args[i]} in
	-only | --only) only=${args[i + 1]:-} ;;
	-only=* | --only=*) only=${args[i]#*=} ;;
	*) continue ;;
	esac
	if [[ ,$only, != *,stripe,* ]]; then wants_stripe=0; fi
done
if ((wants_stripe)) && [[ -z ${STRIPE_MOCK_URL:-} ]]; then
	services_start || exit 1
fi

# Build first, so that compiling does not share the cores with a measurement.
# cmd/bench is its own module: build it from its directory.
mkdir -p .tmp
(cd cmd/bench && go build -o ../../.tmp/bench .)

cmd="scripts/bench.sh${*:+ $*}"
if ((quick)); then
	args=(-quick -write=false "${args[@]}")
fi
log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
BENCH_DATABASE_URL=$url ./.tmp/bench -db "$url" -command "$cmd" "${args[@]}"
