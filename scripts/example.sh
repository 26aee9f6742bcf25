#!/usr/bin/env bash
# scripts/example.sh: build examples/coupon and use it as a new user would,
# on a fresh SQLite file and on a fresh Postgres database: the same key
# twice (one coupon, the second answer replayed), the same key with another
# percent_off (a conflict naming percent_off), get_operation by key
# (succeeded). Then build examples/licenses (idemgate inside a team's own
# router, go-sdk server, keys, pool, River client and migrations) and drive it on both
# engines with the official MCP TypeScript SDK (e2e/licenses.example.mjs).
# scripts/test.sh runs it; TEST_DATABASE_URL names the server.
#
#   scripts/example.sh           build and run the example on both engines
#   scripts/example.sh --help    this text; starts nothing
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'example.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
for arg in "$@"; do
	case $arg in
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		log "unknown argument '$arg' (it takes none; see --help)"
		exit 2
		;;
	esac
done
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-example.XXXXXX")
pid=""
pgdb=""
pgdb2=""
admin_url=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
cleanup() {
	local rc=$?
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	[[ -n $pgdb ]] && psql "$admin_url" -XAtqc "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" >/dev/null 2>&1
	[[ -n $pgdb2 ]] && psql "$admin_url" -XAtqc "DROP DATABASE IF EXISTS $pgdb2 WITH (FORCE)" >/dev/null 2>&1
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT

go build -o "$tmp/coupon" ./examples/coupon
go build -o "$tmp/licenses" ./examples/licenses
if [[ ! -f e2e/node_modules/.package-lock.json || e2e/package-lock.json -nt e2e/node_modules/.package-lock.json ]]; then
	log "npm ci in e2e/"
	(cd e2e && npm ci --no-audit --no-fund >&2)
fi

# run_example ENGINE DATABASE_URL: start it, exercise it, stop it.
run_example() {
	local engine=$1 url=$2 port="" token="" out key ans
	for p in $(seq 18200 18300); do
		port_open 127.0.0.1 "$p" || { port=$p; break; }
	done
	[[ -n $port ]] || die "no free port"
	: >"$tmp/$engine.out"
	DATABASE_URL=$url IDEMGATE_API_ADDR=127.0.0.1:$port "$tmp/coupon" >"$tmp/$engine.out" 2>"$tmp/$engine.log" &
	pid=$!
	for _ in $(seq 1 600); do
		token=$(sed -n 's/^token: //p' "$tmp/$engine.out")
		[[ -n $token ]] && port_open 127.0.0.1 "$port" && break
		kill -0 "$pid" 2>/dev/null || { cat "$tmp/$engine.log" >&2; die "$engine: the example exited"; }
		sleep 0.1
	done
	[[ -n $token ]] || die "$engine: no token line within 60s"
	base="http://127.0.0.1:$port"
	key="coupon-smoke-$engine-$RANDOM"
	call() { curl -sS -XPOST "$base/v1/tools/issue_coupon" -H "Authorization: Bearer $token" -H "Idempotency-Key: $key" \
		-H 'Content-Type: application/json' -d "$1"; }
	ans=$(call '{"customer_id":"cus_1","percent_off":10}')
	grep -q '"outcome":"accepted"' <<<"$ans" || die "$engine: first call: $ans"
	ans=$(call '{"customer_id":"cus_1","percent_off":10}')
	grep -q '"outcome":"replayed"' <<<"$ans" || die "$engine: second call not replayed: $ans"
	ans=$(call '{"customer_id":"cus_1","percent_off":20}')
	grep -q '"code":"idempotency_key_reuse_with_different_args"' <<<"$ans" && grep -q '"fields":\["percent_off"\]' <<<"$ans" ||
		die "$engine: other percent_off is not a conflict naming percent_off: $ans"
	out=$(curl -sS -XPOST "$base/mcp" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
		-H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-06-18' \
		-d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_operation","arguments":{"tool":"issue_coupon","idempotency_key":"'"$key"'"}}}')
	grep -q '\\"status\\":\\"succeeded\\"\|"status":"succeeded"' <<<"$out" || die "$engine: get_operation over MCP: $out"
	if [[ $engine == postgres ]]; then
		n=$(psql "${url%[?&]pool_max_conns=*}" -XAtqc "SELECT count(*) FROM coupons")
		[[ $n == 1 ]] || die "postgres: $n rows in coupons, want 1"
	fi
	log "$engine: one coupon, the retry replayed, the conflict named percent_off, get_operation succeeded"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
}

run_example sqlite "sqlite:$tmp/coupon.db"
# new_db NAME_VAR: create a fresh database, put its name in NAME_VAR (the
# trap drops it) and its URL in pg_url. Under scripts/test.sh the example opens
# at most TEST_DB_MAX_CONNS connections, as the Go tests' processes do.
new_db() {
	local name url
	name="idemgate_example_$(date +%s)_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
	psql "$admin_url" -XAtqc "CREATE DATABASE $name" >/dev/null
	printf -v "$1" '%s' "$name"
	url=$(sed -E "s#/[^/?]*(\?|$)#/$name\1#" <<<"$admin_url")
	if [[ -n ${TEST_DB_MAX_CONNS:-} ]]; then
		[[ $url == *\?* ]] && url+="&" || url+="?"
		url+="pool_max_conns=$TEST_DB_MAX_CONNS"
	fi
	pg_url=$url
}

new_db pgdb
run_example postgres "$pg_url"

# run_licenses ENGINE DATABASE_URL: start examples/licenses, drive it with
# the TypeScript SDK, stop it.
run_licenses() {
	local engine=$1 url=$2 port="" key ro
	for p in $(seq 18300 18400); do
		port_open 127.0.0.1 "$p" || { port=$p; break; }
	done
	[[ -n $port ]] || die "no free port"
	export LICENSES_SIGNING_KEY
	LICENSES_SIGNING_KEY=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
	key=$("$tmp/licenses" token acme e2e-agent licenses:grant licenses:read workspaces:provision)
	ro=$("$tmp/licenses" token acme e2e-reader licenses:read)
	DATABASE_URL=$url LICENSES_ADDR=127.0.0.1:$port IDEMGATE_LOG_LEVEL=warn "$tmp/licenses" >"$tmp/lic-$engine.out" 2>"$tmp/lic-$engine.log" &
	pid=$!
	for _ in $(seq 1 600); do
		curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break
		kill -0 "$pid" 2>/dev/null || { cat "$tmp/lic-$engine.log" >&2; die "licenses on $engine exited"; }
		sleep 0.1
	done
	if ! LICENSES_URL=http://127.0.0.1:$port LICENSES_KEY=$key LICENSES_KEY_READONLY=$ro node --test e2e/licenses.example.mjs >&2; then
		cat "$tmp/lic-$engine.log" >&2
		die "licenses on $engine: the TypeScript SDK tests failed"
	fi
	if [[ $engine == postgres ]]; then
		n=$(psql "${url%[?&]pool_max_conns=*}" -XAtqc "SELECT count(*) FROM licenses")
		[[ $n == 1 ]] || die "postgres: $n rows in licenses, want 1"
	fi
	log "licenses on $engine: the TypeScript SDK saw one server, one license per key, the read, the conflict, the scopes"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
}

run_licenses sqlite "sqlite:$tmp/licenses.db"
new_db pgdb2
run_licenses postgres "$pg_url"
psql "$admin_url" -XAtqc "DROP DATABASE IF EXISTS $pgdb2 WITH (FORCE)" >/dev/null
