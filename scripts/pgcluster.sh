# shellcheck shell=bash disable=SC2034 # pg_* are outputs for the sourcing script
# scripts/pgcluster.sh: a throwaway Postgres cluster, for scripts/test.sh (when
# no server is reachable), scripts/bench.sh (--profile) and scripts/chaos.sh
# (which restarts it mid-run). Source it; it defines functions only, and
# reports through the caller's `log`.
#
#   pgcluster_start DIR "SERVER OPTIONS"
#       initdb into DIR/data and start it on a free loopback port, as the
#       postgres user when running as root (initdb and pg_ctl refuse root);
#       sets pg_bin, pg_as (the command prefix to run its binaries),
#       pg_data, pg_port and pg_url. Logs: DIR/initdb.log, DIR/postgres.log.
#       Returns non-zero, having said why, when it cannot.
#   pgcluster_stop [MODE]
#       stops the cluster pgcluster_start started (pg_ctl -m MODE, default
#       fast); safe to call at any time.
# Run rather than sourced, it prints this and exits (0 for -h or --help).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	sed -n '2,/^if /p' "$0" | sed '$d; s/^# \{0,1\}//'
	[[ ${1:-} == -h || ${1:-} == --help ]] && exit 0
	exit 2
fi

pg_bin=""
pg_as=()
pg_data=""
pg_port=""
pg_url=""

pgcluster_start() {
	local dir=$1 opts=$2 initdb p try
	initdb=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | grep -v '\*' | sort -V | tail -n 1 || true)
	[[ -n $initdb ]] || initdb=$(command -v initdb || true)
	if [[ -z $initdb ]]; then
		log "initdb not found (looked in /usr/lib/postgresql/*/bin and PATH): install Postgres (apt-get install postgresql)"
		return 1
	fi
	pg_bin=$(dirname "$initdb")
	if [[ $EUID -eq 0 ]]; then
		if ! id postgres >/dev/null 2>&1; then
			log "running as root without a 'postgres' user to run a throwaway cluster as (useradd -r postgres)"
			return 1
		fi
		pg_as=(runuser -u postgres --)
		chown postgres: "$dir"
	else
		pg_as=(env)
	fi
	pg_data=$dir/data
	if ! "${pg_as[@]}" "$pg_bin/initdb" -D "$pg_data" -U postgres -A trust -E UTF8 --no-locale --no-sync \
		>"$dir/initdb.log" 2>&1; then
		cat "$dir/initdb.log" >&2
		return 1
	fi
	for try in 1 2 3 4 5; do
		p=$((40000 + (RANDOM * 32768 + RANDOM) % 20000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
		if "${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_data" -l "$dir/postgres.log" -w -t 60 \
			-o "-p $p -k $dir -c listen_addresses=127.0.0.1 $opts" start >/dev/null; then
			pg_port=$p
			pg_url="postgres://postgres@127.0.0.1:$p/postgres?sslmode=disable"
			log "throwaway Postgres ($pg_bin) on 127.0.0.1:$p in $dir"
			return 0
		fi
		log "Postgres did not start on port $p (try $try); retrying on another port"
	done
	cat "$dir/postgres.log" >&2
	return 1
}

pgcluster_stop() {
	if [[ -n $pg_data && -f $pg_data/postmaster.pid ]]; then
		"${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_data" -m "${1:-fast}" -w stop >/dev/null 2>&1
	fi
	return 0
}
