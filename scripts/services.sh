# shellcheck shell=bash
# scripts/services.sh: the fake downstreams the tests and scripts/dev.sh talk
# to (stripe-mock for Stripe's API, Mailpit for SMTP). Source it; it defines
# functions only:
#
#   source scripts/services.sh
#   services_install # installs the pinned binaries into <repo>/.tmp/bin
#                    # (nothing to do when they are current)
#   services_start   # installs them, starts both on free loopback ports,
#                    # waits until they accept connections, and exports
#                    #   STRIPE_MOCK_URL=http://127.0.0.1:P
#                    #   MAILPIT_SMTP_ADDR=127.0.0.1:P1
#                    #   MAILPIT_API_URL=http://127.0.0.1:P2 (API and web UI)
#   services_stop    # stops what services_start started, removes its temp dir;
#                    # safe to call at any time, also twice or without a start
#   services_free_port [EXCLUDE...]
#                    # prints a loopback port nothing listens on (yet)
#
# A variable that is already set when services_start runs is kept: the service
# at that address is used instead of starting one (it must accept connections;
# for Mailpit both variables must be set). The binaries are installed anyway,
# because internal/mailpit.Start may start private Mailpit instances.
#
# Mailpit options, read by services_start (scripts/dev.sh sets them):
#   SERVICES_MAILPIT_SMTP=HOST:PORT and SERVICES_MAILPIT_UI=HOST:PORT
#       fixed addresses instead of free ports (both or neither); a port that
#       is taken fails the start, with no retry elsewhere
#   SERVICES_MAILPIT_DB=FILE
#       Mailpit's database (the mailbox), kept by services_stop and found
#       again by the next start; it keeps Mailpit's default of 500 messages.
#       Unset: a database in the temp dir, unlimited, removed on stop.
#
# The binaries are built with `go install module@version`, which reports no
# useful --version ("master", "dev"), so the installed version is read from
# the module information Go embeds in the binary (`go version -m`).
#
# Works with and without `set -euo pipefail` in the caller. Messages go to
# stderr, prefixed "services.sh:". On failure a function returns non-zero
# after stopping whatever it had started.
# Run rather than sourced, it prints this and exits (0 for -h or --help).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	sed -n '2,/^if /p' "$0" | sed '$d; s/^# \{0,1\}//'
	[[ ${1:-} == -h || ${1:-} == --help ]] && exit 0
	exit 2
fi

_SVC_STRIPE_MOCK_MODULE=github.com/stripe/stripe-mock
_SVC_STRIPE_MOCK_VERSION=v0.203.0
_SVC_MAILPIT_MODULE=github.com/axllent/mailpit
_SVC_MAILPIT_VERSION=v1.33.1
_SVC_WAIT_SECONDS=30

_svc_tmp=""  # temp dir holding logs and Mailpit's database
_svc_pids=() # processes services_start started
_svc_vars=() # variables services_start exported (unset again by services_stop)

_svc_log() { printf 'services.sh: %s\n' "$*" >&2; }

# _svc_root prints the repository root (the parent of this file's directory).
_svc_root() { (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); }

# _svc_port_open HOST PORT: does anything accept TCP connections there?
_svc_port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# _svc_free_port [EXCLUDE...]: prints a loopback port nothing listens on.
# Another process may still take it before we bind it; callers retry.
_svc_free_port() {
	local p i x taken
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		taken=0
		for x in "$@"; do
			if [[ $x == "$p" ]]; then taken=1; fi
		done
		if ((taken == 0)) && ! _svc_port_open 127.0.0.1 "$p"; then
			printf '%s\n' "$p"
			return 0
		fi
	done
	_svc_log "found no free loopback port"
	return 1
}

# _svc_install BIN MODULE VERSION: go install MODULE@VERSION into
# <repo>/.tmp/bin unless BIN there was already built from MODULE VERSION.
_svc_install() {
	local name=$1 module=$2 version=$3 bindir have
	bindir="$(_svc_root)/.tmp/bin"
	if [[ -x "$bindir/$name" ]]; then
		have=$(go version -m "$bindir/$name" 2>/dev/null | awk '$1 == "mod" { print $2 " " $3; exit }')
		if [[ $have == "$module $version" ]]; then return 0; fi
		_svc_log "$bindir/$name is ${have:-of unknown version}, want $module $version: reinstalling"
	fi
	mkdir -p "$bindir" || return 1
	_svc_log "installing $module@$version into $bindir"
	if ! GOBIN="$bindir" go install "$module@$version"; then
		_svc_log "go install $module@$version failed (see above): cannot start ${name}"
		return 1
	fi
}

# _svc_alive PID: is that process still running?
_svc_alive() { kill -0 "$1" 2>/dev/null; }

# _svc_wait_port NAME PID LOG HOST PORT: waits until HOST:PORT accepts
# connections, failing (with LOG) when PID exits or _SVC_WAIT_SECONDS pass.
_svc_wait_port() {
	local name=$1 pid=$2 logf=$3 host=$4 port=$5 deadline=$((SECONDS + _SVC_WAIT_SECONDS))
	until _svc_port_open "$host" "$port"; do
		if ! _svc_alive "$pid"; then
			_svc_log "$name exited before listening on $host:$port; its log ($logf):"
			sed 's/^/  /' "$logf" >&2
			return 1
		fi
		if ((SECONDS >= deadline)); then
			_svc_log "$name does not accept connections on $host:$port after ${_SVC_WAIT_SECONDS}s; its log ($logf):"
			sed 's/^/  /' "$logf" >&2
			return 1
		fi
		sleep 0.1
	done
}

# _svc_kill PID: stops one process started here and reaps it.
_svc_kill() {
	local pid=$1 i
	if _svc_alive "$pid"; then kill "$pid" 2>/dev/null; fi
	for ((i = 0; i < 50; i++)); do
		_svc_alive "$pid" || break
		sleep 0.1
	done
	if _svc_alive "$pid"; then kill -9 "$pid" 2>/dev/null; fi
	wait "$pid" 2>/dev/null || true
	return 0
}

# _svc_start_stripe_mock: starts stripe-mock on system-chosen loopback ports
# (HTTP, and HTTPS which it opens unless told otherwise) and reads the HTTP
# address from its log, so there is no race for the port.
_svc_start_stripe_mock() {
	local bin logf pid addr deadline=$((SECONDS + _SVC_WAIT_SECONDS))
	bin="$(_svc_root)/.tmp/bin/stripe-mock"
	logf="$_svc_tmp/stripe-mock.log"
	# -http-addr alone still opens HTTPS on :12112 (all interfaces); give it
	# a loopback port of its own instead.
	"$bin" -http-addr 127.0.0.1:0 -https-addr 127.0.0.1:0 >"$logf" 2>&1 &
	pid=$!
	_svc_pids+=("$pid")
	until addr=$(sed -n 's/^Listening for HTTP at address: \(127\.0\.0\.1:[0-9][0-9]*\)$/\1/p' "$logf" 2>/dev/null) && [[ -n $addr ]]; do
		if ! _svc_alive "$pid" || ((SECONDS >= deadline)); then
			_svc_log "stripe-mock did not report its HTTP address; its log ($logf):"
			sed 's/^/  /' "$logf" >&2
			return 1
		fi
		sleep 0.1
	done
	_svc_wait_port stripe-mock "$pid" "$logf" 127.0.0.1 "${addr##*:}" || return 1
	export STRIPE_MOCK_URL="http://$addr"
	_svc_vars+=(STRIPE_MOCK_URL)
	_svc_log "stripe-mock $_SVC_STRIPE_MOCK_VERSION at $STRIPE_MOCK_URL (pid $pid)"
}

# _svc_start_mailpit: starts Mailpit on free loopback ports (it logs the
# configured address, not the bound one, so port 0 cannot be used); retries
# with other ports if it loses a race for them. With SERVICES_MAILPIT_SMTP
# and SERVICES_MAILPIT_UI it starts once, on those addresses.
_svc_start_mailpit() {
	local bin logf pid smtp http db try tries=3 fixed=0
	local -a limit=(--max 0) # no message limit (the default keeps 500)
	bin="$(_svc_root)/.tmp/bin/mailpit"
	if [[ -n ${SERVICES_MAILPIT_SMTP:-} || -n ${SERVICES_MAILPIT_UI:-} ]]; then
		if [[ -z ${SERVICES_MAILPIT_SMTP:-} || -z ${SERVICES_MAILPIT_UI:-} ]]; then
			_svc_log "set both SERVICES_MAILPIT_SMTP and SERVICES_MAILPIT_UI, or neither"
			return 1
		fi
		fixed=1 tries=1
	fi
	if [[ -n ${SERVICES_MAILPIT_DB:-} ]]; then
		limit=()
	fi
	for ((try = 1; try <= tries; try++)); do
		if ((fixed)); then
			smtp=$SERVICES_MAILPIT_SMTP http=$SERVICES_MAILPIT_UI
			if _svc_port_open "${smtp%:*}" "${smtp##*:}" || _svc_port_open "${http%:*}" "${http##*:}"; then
				_svc_log "cannot start Mailpit on SMTP $smtp and UI $http: a port is taken"
				return 1
			fi
		else
			smtp=$(_svc_free_port) || return 1
			http=$(_svc_free_port "$smtp") || return 1
			smtp=127.0.0.1:$smtp http=127.0.0.1:$http
		fi
		logf="$_svc_tmp/mailpit-$try.log"
		db=${SERVICES_MAILPIT_DB:-$_svc_tmp/mailpit-$try.db}
		# Any or no SMTP auth, no TLS, no reverse DNS.
		"$bin" --smtp "$smtp" --listen "$http" --database "$db" "${limit[@]}" \
			--smtp-auth-accept-any --smtp-auth-allow-insecure --smtp-disable-rdns \
			--disable-version-check >"$logf" 2>&1 &
		pid=$!
		_svc_pids+=("$pid")
		if _svc_wait_port mailpit "$pid" "$logf" "${smtp%:*}" "${smtp##*:}" 2>/dev/null &&
			_svc_wait_port mailpit "$pid" "$logf" "${http%:*}" "${http##*:}" 2>/dev/null; then
			export MAILPIT_SMTP_ADDR=$smtp
			export MAILPIT_API_URL=http://$http
			_svc_vars+=(MAILPIT_SMTP_ADDR MAILPIT_API_URL)
			_svc_log "mailpit $_SVC_MAILPIT_VERSION: SMTP $MAILPIT_SMTP_ADDR, API $MAILPIT_API_URL, database $db (pid $pid)"
			return 0
		fi
		if _svc_alive "$pid"; then
			# Running but not listening within the bound: no point retrying.
			_svc_log "mailpit does not accept connections on $smtp and $http after ${_SVC_WAIT_SECONDS}s; its log ($logf):"
			sed 's/^/  /' "$logf" >&2
			return 1
		fi
		_svc_kill "$pid"
		if ((try == tries)); then
			_svc_log "mailpit exited at start ($try time(s)); its last log ($logf):"
			sed 's/^/  /' "$logf" >&2
			return 1
		fi
		_svc_log "mailpit exited at start (port taken?); retrying on other ports"
	done
}

# _svc_check_url NAME VALUE: does the host:port of VALUE (host:port or an
# http:// URL) accept connections?
_svc_check_url() {
	local name=$1 url=$2 hostport host port
	hostport=${url#*://}
	hostport=${hostport%%/*}
	host=${hostport%:*}
	port=${hostport##*:}
	if [[ $host == "$hostport" || -z $port ]]; then
		_svc_log "$name=$url has no host:port"
		return 1
	fi
	if ! _svc_port_open "$host" "$port"; then
		_svc_log "$name=$url is set but nothing accepts connections there"
		return 1
	fi
}

services_install() {
	if ! command -v go >/dev/null; then
		_svc_log "go is not on PATH: cannot install stripe-mock and mailpit"
		return 1
	fi
	_svc_install stripe-mock "$_SVC_STRIPE_MOCK_MODULE" "$_SVC_STRIPE_MOCK_VERSION" || return 1
	_svc_install mailpit "$_SVC_MAILPIT_MODULE" "$_SVC_MAILPIT_VERSION" || return 1
}

services_free_port() { _svc_free_port "$@"; }

services_start() {
	if [[ -n $_svc_tmp ]]; then
		_svc_log "services_start: already started (call services_stop first)"
		return 1
	fi
	services_install || return 1

	_svc_tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-services.XXXXXX") || {
		_svc_tmp=""
		return 1
	}

	if [[ -n ${STRIPE_MOCK_URL:-} ]]; then
		_svc_check_url STRIPE_MOCK_URL "$STRIPE_MOCK_URL" || {
			services_stop
			return 1
		}
		_svc_log "stripe-mock from STRIPE_MOCK_URL: $STRIPE_MOCK_URL"
	else
		_svc_start_stripe_mock || {
			services_stop
			return 1
		}
	fi

	if [[ -n ${MAILPIT_SMTP_ADDR:-} && -n ${MAILPIT_API_URL:-} ]]; then
		if ! _svc_check_url MAILPIT_SMTP_ADDR "$MAILPIT_SMTP_ADDR" ||
			! _svc_check_url MAILPIT_API_URL "$MAILPIT_API_URL"; then
			services_stop
			return 1
		fi
		_svc_log "Mailpit from MAILPIT_SMTP_ADDR and MAILPIT_API_URL: $MAILPIT_SMTP_ADDR, $MAILPIT_API_URL"
	elif [[ -n ${MAILPIT_SMTP_ADDR:-} || -n ${MAILPIT_API_URL:-} ]]; then
		_svc_log "set both MAILPIT_SMTP_ADDR and MAILPIT_API_URL, or neither"
		services_stop
		return 1
	else
		_svc_start_mailpit || {
			services_stop
			return 1
		}
	fi
	export STRIPE_MOCK_URL MAILPIT_SMTP_ADDR MAILPIT_API_URL
}

services_stop() {
	local pid v
	for pid in "${_svc_pids[@]}"; do
		_svc_kill "$pid"
	done
	_svc_pids=()
	for v in "${_svc_vars[@]}"; do
		unset "$v"
	done
	_svc_vars=()
	if [[ -n $_svc_tmp ]]; then
		rm -rf "$_svc_tmp"
		_svc_tmp=""
	fi
	return 0
}
