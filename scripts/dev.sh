#!/usr/bin/env bash
# scripts/dev.sh: the quickstart. With nothing but Go installed it
#   1. installs (pinned `go install`) and starts stripe-mock and Mailpit on
#      loopback ports (scripts/services.sh),
#   2. builds idemctl and the api, migrates and seeds a demo tenant into an
#      embedded SQLite file (.tmp/dev/idemgate.db),
#   3. runs the api with its worker in the same process (one writer per file),
#   4. prints the MCP endpoint, the demo token, an MCP client configuration
#      and a curl line that makes a refund.
# Ctrl-C stops everything it started. Running it again reuses the database
# (migrations and seed are idempotent) and the generated IDEMGATE_SECRET.
#
#   scripts/dev.sh                 api on 127.0.0.1:8080 (IDEMGATE_API_ADDR)
#   DEV_EXIT_AFTER_READY=1 scripts/dev.sh   start, print, then stop
#   DEV_SMOKE=1 scripts/dev.sh     start, run the printed curl line twice (the
#                                  second must be a replay), then stop: what
#                                  scripts/test.sh runs
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

log() { printf 'dev.sh: %s\n' "$*" >&2; }

command -v go >/dev/null || { log "Go is required: install Go 1.26 (https://go.dev/dl/)"; exit 1; }

dev_dir="${DEV_DIR:-$root/.tmp/dev}"
bin_dir="$root/.tmp/bin"
mkdir -p "$dev_dir" "$bin_dir"
api_pid=""

cleanup() {
	local rc=$?
	set +e
	if [[ -n "$api_pid" ]]; then
		kill -TERM "$api_pid" 2>/dev/null
		wait "$api_pid" 2>/dev/null
	fi
	declare -F services_stop >/dev/null && services_stop
	log "stopped"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. stripe-mock and Mailpit.
source scripts/services.sh
services_start

# 2. Build, migrate, seed.
log "building idemctl and api"
go build -o "$bin_dir/idemctl" ./cmd/idemctl
go build -o "$bin_dir/idemgate-api" ./cmd/api

if [[ ! -s "$dev_dir/secret" ]]; then
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dev_dir/secret")
fi

export DATABASE_URL="sqlite:$dev_dir/idemgate.db"
export IDEMGATE_SECRET
IDEMGATE_SECRET=$(cat "$dev_dir/secret")
export STRIPE_API_KEY="sk_test_123"
export STRIPE_API_BASE="$STRIPE_MOCK_URL"
export SMTP_ADDR="$MAILPIT_SMTP_ADDR"
export IDEMGATE_API_ADDR="${IDEMGATE_API_ADDR:-127.0.0.1:8080}"

"$bin_dir/idemctl" migrate >/dev/null
"$bin_dir/idemctl" seed --file scripts/demo-seed.json >/dev/null
token=idg_demo_acme_support_bot

# 3. The api with its embedded worker.
host=${IDEMGATE_API_ADDR%:*}
port=${IDEMGATE_API_ADDR##*:}
if (exec 3<>"/dev/tcp/${host:-127.0.0.1}/$port") 2>/dev/null; then
	log "$IDEMGATE_API_ADDR is already in use (another dev.sh?); stop it or set IDEMGATE_API_ADDR=127.0.0.1:PORT"
	exit 1
fi
log "starting the api on $IDEMGATE_API_ADDR (log: $dev_dir/api.log)"
"$bin_dir/idemgate-api" >"$dev_dir/api.log" 2>&1 &
api_pid=$!
base="http://$IDEMGATE_API_ADDR"
for _ in $(seq 1 100); do
	if curl -fsS "$base/readyz" >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$api_pid" 2>/dev/null; then
		log "the api exited; its log:"
		cat "$dev_dir/api.log" >&2
		exit 1
	fi
	sleep 0.1
done
curl -fsS "$base/readyz" >/dev/null || { log "the api is not ready; its log:"; cat "$dev_dir/api.log" >&2; exit 1; }

# 4. What to do next.
cat <<MSG

idemgate is running (embedded SQLite, worker in the api process).

  MCP endpoint (Streamable HTTP): $base/mcp
  Demo token (tenant acme):       $token
  Mailpit (password-reset mail):  $MAILPIT_API_URL
  stripe-mock (Stripe's API):     $STRIPE_MOCK_URL
  Metrics:                        $base/metrics

MCP client configuration (Claude Desktop's claude_desktop_config.json, via mcp-remote):
{
  "mcpServers": {
    "idemgate": {
      "command": "npx",
      "args": ["-y", "mcp-remote", "$base/mcp", "--header", "Authorization:Bearer $token"]
    }
  }
}
MCP Inspector: npx @modelcontextprotocol/inspector  (transport "Streamable HTTP",
URL $base/mcp, header Authorization: Bearer $token)

Make a refund (run it twice: the second answer is replayed, not a second refund):
curl -s -X POST $base/v1/tools/refund_order -H 'Authorization: Bearer $token' -H 'Idempotency-Key: demo-refund-0001' -H 'Content-Type: application/json' -d '{"order_id":"ord_9f2","amount_cents":1500}'

Press Ctrl-C to stop.
MSG

if [[ -n "${DEV_SMOKE:-}" ]]; then
	key="smoke-refund-$(date +%s%N)"
	for attempt in 1 2; do
		headers=$(curl -fsS -D - -o "$dev_dir/smoke.json" -X POST "$base/v1/tools/refund_order" \
			-H "Authorization: Bearer $token" -H "Idempotency-Key: $key" -H 'Content-Type: application/json' \
			-d '{"order_id":"ord_a71","amount_cents":100}')
		grep -q '"status":"succeeded"' "$dev_dir/smoke.json" || { log "smoke: refund $attempt did not succeed: $(cat "$dev_dir/smoke.json")"; exit 1; }
	done
	grep -qi '^Idempotent-Replayed: true' <<<"$headers" || { log "smoke: the retry was not a replay"; exit 1; }
	log "smoke: refund succeeded through stripe-mock; the retry was replayed"
	exit 0
fi
if [[ -n "${DEV_EXIT_AFTER_READY:-}" ]]; then
	exit 0
fi
wait "$api_pid"
