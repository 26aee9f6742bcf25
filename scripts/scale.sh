#!/usr/bin/env bash
# scripts/scale.sh: how throughput and CPU per operation change with more api
# replicas and worker processes, against the commit rate of the same
# Postgres, in one run (the measured table of docs/scaling.md).
#
#   scripts/scale.sh             1 and 2 api replicas × 1, 2 and 4 workers,
#                                12s windows (about 3 minutes); prints Markdown
#   scripts/scale.sh --write     the same, and rewrites the generated part of
#                                docs/scaling.md (with --pgbouncer: its
#                                PgBouncer part)
#   scripts/scale.sh --quick     1×1 and 2×2, 4s windows; for iteration
#   scripts/scale.sh --pgbouncer the deployments connect through PgBouncer
#                                (pool_mode=transaction; installed when missing)
#   other arguments go to `chaosdriver scale` (-shapes 1x1,2x4 -window 20s
#   -concurrency 64 ...)
#
# Everything runs on loopback in a temp dir removed on exit: a throwaway
# Postgres cluster of its own (initdb + pg_ctl, fsync and synchronous_commit
# on: the commit rate must be the disk's), cmd/api, cmd/worker and cmd/idemctl
# built without -race, and internal/chaos/cmd/chaosdriver, which starts each
# deployment's processes, drives a closed loop of `apply_credit` calls (an
# in-transaction tool: no Stripe or SMTP in the way) and reads every
# process's CPU from /proc. SCALE_KEEP=1 keeps the temp dir (logs).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
started=$SECONDS

log() { printf 'scale.sh: %s\n' "$*" >&2; }

write=0 pgbouncer=0 args=() cmdline="scripts/scale.sh"
for a in "$@"; do
	cmdline+=" $a"
	case $a in
	--write) write=1 ;;
	--quick) args+=(-shapes 1x1,2x2 -window 4s -warmup 2s) ;;
	--pgbouncer) pgbouncer=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) args+=("$a") ;;
	esac
done

tmp=""
driver_pid=""
source scripts/pgcluster.sh
source scripts/pgbouncer.sh
cleanup() {
	local rc=$? i
	set +e
	if [[ -n $driver_pid ]]; then # it stops the processes it started
		kill "$driver_pid" 2>/dev/null
		for ((i = 0; i < 300; i++)); do
			kill -0 "$driver_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$driver_pid" 2>/dev/null
	fi
	pgbouncer_stop
	pgcluster_stop immediate
	if [[ -n $tmp ]]; then
		if [[ ${SCALE_KEEP:-0} == 1 ]]; then
			log "SCALE_KEEP=1: kept $tmp"
		elif ((rc != 0)); then
			log "FAILED (exit $rc); the tails of the logs:"
			for f in "$tmp"/logs/*.log; do
				[[ -s $f ]] && { printf '\n----- %s -----\n' "${f##*/}" >&2; tail -n 15 "$f" | cut -c1-300 >&2; }
			done
			rm -rf "$tmp"
		else
			rm -rf "$tmp"
		fi
	fi
	((rc == 0)) && log "OK in $((SECONDS - started))s"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-scale.XXXXXX")
chmod 755 "$tmp"
mkdir -p "$tmp/bin" "$tmp/logs" "$tmp/pg"

log "building cmd/api, cmd/worker, cmd/idemctl and chaosdriver into $tmp/bin"
go build -o "$tmp/bin/" ./cmd/api ./cmd/worker ./cmd/idemctl ./internal/chaos/cmd/chaosdriver
bin=$tmp/bin

pgcluster_start "$tmp/pg" "-c max_connections=400" || exit 1
direct_url=$pg_url
export DATABASE_URL=$direct_url
"$bin/idemctl" migrate >"$tmp/logs/migrate.log" 2>&1 || { cat "$tmp/logs/migrate.log" >&2; exit 1; }
"$bin/chaosdriver" scale -write-seed "$tmp/seed.json"
"$bin/idemctl" seed --file "$tmp/seed.json" >"$tmp/logs/seed.log" 2>&1 || { cat "$tmp/logs/seed.log" >&2; exit 1; }

label="Postgres directly" pooler=()
if ((pgbouncer)); then
	mkdir -p "$tmp/pgbouncer"
	pgbouncer_start "$tmp/pgbouncer" "$pg_port" 40 || exit 1
	# As the README advises: everything through PgBouncer.
	export DATABASE_URL=$pgb_url IDEMGATE_DB_POOLER=transaction
	label="PgBouncer 1.18 (pool_mode=transaction, 40 server connections; IDEMGATE_DB_POOLER=transaction, pgx cache_describe, River poll-only)"
	pooler=(-pooler-pid "$(cat "$tmp/pgbouncer/pgbouncer.pid")")
fi

# What the api replicas and the workers read. apply_credit touches neither
# Stripe nor SMTP; the worker still wants them configured.
export STRIPE_API_KEY=sk_test_scale STRIPE_API_BASE=http://127.0.0.1:9 SMTP_ADDR=127.0.0.1:9
export IDEMGATE_SECRET=scale-secret-0123456789abcdef0123456789abcdef
export IDEMGATE_RATE_LIMIT=0 IDEMGATE_WAIT=2s IDEMGATE_WORKER_ADDR=127.0.0.1:0 IDEMGATE_LOG_LEVEL=info

out=$tmp/table.md
"$bin/chaosdriver" scale -api-bin "$bin/api" -worker-bin "$bin/worker" -log-dir "$tmp/logs" \
	-database-url "$direct_url" -label "$label" -command "$cmdline" -out "$out" "${pooler[@]}" "${args[@]}" &
driver_pid=$!
wait "$driver_pid" # interruptible: a signal runs cleanup, which stops the driver first
driver_pid=""

if ((write)); then
	doc=docs/scaling.md marker=scale
	((pgbouncer)) && marker=scale-pgbouncer
	grep -q "<!-- $marker:begin" "$doc" && grep -q "<!-- $marker:end" "$doc" || { log "$doc has no $marker:begin/$marker:end markers"; exit 1; }
	awk -v table="$out" -v begin="<!-- $marker:begin" -v end="<!-- $marker:end" '
		index($0, begin) == 1 { print; while ((getline line < table) > 0) print line; skip = 1; next }
		index($0, end) == 1 { skip = 0 }
		!skip { print }
	' "$doc" >"$tmp/scaling.md"
	cp "$tmp/scaling.md" "$doc"
	log "rewrote the measured table in $doc"
fi
