# shellcheck shell=bash disable=SC2034 # pgb_* are outputs for the sourcing script
# scripts/pgbouncer.sh: a throwaway PgBouncer in transaction pooling mode in
# front of a Postgres on loopback, for scripts/chaos.sh --pgbouncer. Source
# it after scripts/pgcluster.sh; it defines functions only, and reports
# through the caller's `log`.
#
#   pgbouncer_install
#       installs Debian's pgbouncer (apt-get install -y pgbouncer, quietly)
#       when no pgbouncer binary is found; needs root. The package's own
#       service is not used.
#   pgbouncer_start DIR PG_PORT [POOL_SIZE]
#       writes DIR/pgbouncer.ini (every database of 127.0.0.1:PG_PORT,
#       auth_type trust, pool_mode transaction, POOL_SIZE server connections
#       per database and user, default 40) and starts pgbouncer on a free
#       loopback port, as the postgres user when running as root (pgbouncer
#       refuses root); sets pgb_port and pgb_url (the postgres database
#       through it). Log: DIR/pgbouncer.log.
#   pgbouncer_stop
#       stops it; safe to call at any time.
# Run rather than sourced, it prints this and exits (0 for -h or --help).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	sed -n '2,/^if /p' "$0" | sed '$d; s/^# \{0,1\}//'
	[[ ${1:-} == -h || ${1:-} == --help ]] && exit 0
	exit 2
fi

pgb_bin=""
pgb_dir=""
pgb_port=""
pgb_url=""

pgbouncer_install() {
	pgb_bin=$(command -v pgbouncer || true)
	[[ -z $pgb_bin && -x /usr/sbin/pgbouncer ]] && pgb_bin=/usr/sbin/pgbouncer
	[[ -n $pgb_bin ]] && return 0
	if [[ $EUID -ne 0 ]]; then
		log "pgbouncer is not installed, and installing it needs root: apt-get install pgbouncer"
		return 1
	fi
	log "installing pgbouncer (apt-get install -y pgbouncer)"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null 2>&1; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
		if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; then
			log "apt-get install pgbouncer failed"
			return 1
		fi
	fi
	pgb_bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
	[[ -x $pgb_bin ]] || { log "pgbouncer installed, but no binary found"; return 1; }
}

pgbouncer_start() {
	local dir=$1 pg_port=$2 pool=${3:-40} p try i as=()
	pgbouncer_install || return 1
	pgb_dir=$dir
	mkdir -p "$dir"
	[[ $EUID -eq 0 ]] && as=(runuser -u postgres --)
	printf '"postgres" ""\n' >"$dir/userlist.txt"
	for try in 1 2 3 4 5; do
		p=$((40000 + (RANDOM * 32768 + RANDOM) % 20000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
		cat >"$dir/pgbouncer.ini" <<-EOF
			[databases]
			* = host=127.0.0.1 port=$pg_port

			[pgbouncer]
			listen_addr = 127.0.0.1
			listen_port = $p
			unix_socket_dir =
			auth_type = trust
			auth_file = $dir/userlist.txt
			pool_mode = transaction
			default_pool_size = $pool
			min_pool_size = 0
			reserve_pool_size = 5
			max_client_conn = 900
			max_db_connections = 0
			server_reset_query =
			server_check_delay = 10
			server_login_retry = 1
			ignore_startup_parameters = extra_float_digits
			logfile = $dir/pgbouncer.log
			pidfile = $dir/pgbouncer.pid
			log_connections = 0
			log_disconnections = 0
			stats_period = 60
		EOF
		[[ $EUID -eq 0 ]] && chown -R postgres: "$dir"
		# Room for max_client_conn descriptors where the hard limit allows.
		if (ulimit -n 4096 2>/dev/null; exec "${as[@]}" "$pgb_bin" -d -q "$dir/pgbouncer.ini") >>"$dir/pgbouncer.start.log" 2>&1; then
			for ((i = 0; i < 100; i++)); do
				if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
					pgb_port=$p
					pgb_url="postgres://postgres@127.0.0.1:$p/postgres?sslmode=disable"
					log "PgBouncer $("$pgb_bin" --version 2>/dev/null | head -n 1 | awk '{print $NF}') (pool_mode transaction, $pool server connections) on 127.0.0.1:$p -> Postgres 127.0.0.1:$pg_port"
					return 0
				fi
				sleep 0.1
			done
		fi
		log "PgBouncer did not start on port $p (try $try)"
		pgbouncer_stop
	done
	cat "$dir/pgbouncer.start.log" "$dir/pgbouncer.log" >&2 2>/dev/null
	return 1
}

pgbouncer_stop() {
	local pid i
	[[ -n $pgb_dir && -f $pgb_dir/pgbouncer.pid ]] || return 0
	pid=$(cat "$pgb_dir/pgbouncer.pid" 2>/dev/null)
	if [[ -n $pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q pgbouncer; then
		kill "$pid" 2>/dev/null
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null
	fi
	rm -f "$pgb_dir/pgbouncer.pid"
	return 0
}
