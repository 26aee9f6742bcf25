# shellcheck shell=bash disable=SC2154 # admin_url, log and die come from the sourcing script
# e2e/lib.sh: what e2e/run.sh and e2e/browser/run.sh share. Source it after
# defining log and die; it defines functions only. Run rather than sourced,
# it prints this and exits (0 for -h or --help).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	sed -n '2,/^if /p' "$0" | sed '$d; s/^# \{0,1\}//'
	[[ ${1:-} == -h || ${1:-} == --help ]] && exit 0
	exit 2
fi

# redact hides a password in a URL for messages.
redact() { sed -E 's#(://[^:/@]+):[^@]*@#\1:xxxxx@#' <<<"$1"; }

# e2e_require_tools: go, node 20+, npm, psql and curl, or die naming what to
# install.
e2e_require_tools() {
	local tool node_major
	for tool in go node npm psql curl; do
		if ! command -v "$tool" >/dev/null; then
			case $tool in
			node | npm) die "$tool is not installed: install Node.js 20 or newer with npm (apt-get install nodejs npm)" ;;
			psql) die "psql is not installed: install the PostgreSQL client (apt-get install postgresql-client)" ;;
			*) die "$tool is not installed" ;;
			esac
		fi
	done
	node_major=$(node -p 'process.versions.node.split(".")[0]')
	((node_major >= 20)) || die "node $(node --version) is too old: install Node.js 20 or newer"
}

# e2e_create_database PREFIX: creates a fresh database PREFIX_<random> on the
# server of $admin_url and sets db (its name, for e2e_drop_database) and
# database_url (the admin URL with the new database's name as its path).
e2e_create_database() {
	psql "$admin_url" -XAtq -c 'SELECT 1' >/dev/null ||
		die "Postgres at $(redact "$admin_url") does not accept connections; set TEST_DATABASE_URL to an admin URL"
	# PREFIX_<unix seconds>_<hex>: scripts/test.sh drops one a killed run
	# left behind, by prefix and age.
	db="$1_$(date +%s)_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
	psql "$admin_url" -XAtq -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$db\"" >/dev/null
	# Under scripts/test.sh every process on it opens at most
	# TEST_DB_MAX_CONNS connections, as the Go tests' do.
	database_url=$(node -e '
		const u = new URL(process.argv[1]);
		u.pathname = "/" + process.argv[2];
		if (process.argv[3]) u.searchParams.set("pool_max_conns", process.argv[3]);
		process.stdout.write(u.toString());
	' "$admin_url" "$db" "${TEST_DB_MAX_CONNS:-}")
	log "database $db on $(redact "$database_url")"
}

# e2e_drop_database: drops $db if e2e_create_database made one.
e2e_drop_database() {
	if [[ -n "${db:-}" ]]; then
		psql "$admin_url" -XAtq -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 ||
			log "could not drop database $db; drop it by hand"
	fi
}

# e2e_require_tests_ran TAP_FILE: dies unless node's TAP report in TAP_FILE
# counts at least one test that ran (passed or failed; node counts a test a
# name pattern leaves out as skipped): a run of no test is no pass.
e2e_require_tests_ran() {
	local pass fail
	pass=$(sed -n 's/^# pass \([0-9][0-9]*\)$/\1/p' "$1" 2>/dev/null | tail -n 1)
	fail=$(sed -n 's/^# fail \([0-9][0-9]*\)$/\1/p' "$1" 2>/dev/null | tail -n 1)
	[[ -n $pass ]] || die "node wrote no test count to $1: did node run at all?"
	((pass + ${fail:-0} > 0)) || die "node ran no test (the arguments or the files matched none): this is a failure, not an OK"
	log "node ran $((pass + ${fail:-0})) test(s)"
}
