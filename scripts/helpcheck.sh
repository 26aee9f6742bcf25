#!/usr/bin/env bash
# scripts/helpcheck.sh: every script in scripts/ and e2e/ (run.sh,
# browser/run.sh, lib.sh) is executable, answers --help and -h with its usage and exit 0,
# and starts nothing. scripts/test.sh runs it as its "script --help" step.
#
#   scripts/helpcheck.sh            check every script
#   scripts/helpcheck.sh FILE...    check these
#   scripts/helpcheck.sh --help     this text
#
# Each script runs with --help and then -h, with at most 20 seconds, in an
# empty TMPDIR, with stand-ins first on PATH for every program a script
# starts things with (go, node, npm, psql, pg_ctl, initdb, docker, curl,
# apt-get, ...): a stand-in that is called records it and fails. A run
# fails the check when it exits non-zero, prints no usage naming the script,
# calls a stand-in (psql and go among them: no database is made), leaves a
# file in TMPDIR, or leaves a process behind.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'helpcheck.sh: %s\n' "$*" >&2; }

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit 0
fi

scripts=("$@")
if ((${#scripts[@]} == 0)); then
	scripts=(scripts/*.sh e2e/run.sh e2e/browser/run.sh e2e/lib.sh)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-helpcheck.XXXXXX")
trap 'rm -rf "$work"' EXIT
shims=$work/shims
mkdir -p "$shims"
calls=$work/calls
for prog in go node npm npx psql pg_isready pg_ctl pg_ctlcluster initdb postgres pgbouncer docker docker-compose \
	apt-get apt dpkg curl wget mailpit stripe-mock chromium chromium-browser runuser sudo su nc; do
	printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 97\n' "$prog" "$calls" >"$shims/$prog"
	chmod +x "$shims/$prog"
done

# children PID: the processes whose session is PID's (a script's leftovers
# keep the session setsid gave it).
children() { ps -eo sid=,pid= | awk -v s="$1" '$1 == s { print $2 }'; }

failed=0
checked=0
for script in "${scripts[@]}"; do
	if [[ ! -x $script ]]; then
		failed=$((failed + 1))
		log "FAIL ${script#./}: not executable (chmod +x, and commit the mode)"
	fi
done
for script in "${scripts[@]}"; do
	name=${script#./}
	for flag in --help -h; do
		checked=$((checked + 1))
		run_tmp=$work/tmp.$checked
		mkdir -p "$run_tmp"
		: >"$calls"
		set +e
		TMPDIR=$run_tmp PATH="$shims:$PATH" setsid timeout 20 bash "$script" "$flag" >"$work/out" 2>"$work/err" &
		pid=$!
		wait "$pid"
		rc=$?
		set -e
		problems=()
		((rc == 0)) || problems+=("exit $rc")
		grep -qF -- "$(basename "$name")" "$work/out" || problems+=("no usage naming $(basename "$name") on stdout")
		[[ -s $calls ]] && problems+=("started: $(paste -sd ';' "$calls")")
		left=$(find "$run_tmp" -mindepth 1 -print -quit)
		[[ -z $left ]] || problems+=("left $left in TMPDIR")
		procs=$(children "$pid")
		if [[ -n $procs ]]; then
			problems+=("left processes: $(tr '\n' ' ' <<<"$procs")")
			kill $procs 2>/dev/null || true
		fi
		if ((${#problems[@]})); then
			failed=$((failed + 1))
			log "FAIL $name $flag: $(printf '%s; ' "${problems[@]}")"
			sed 's/^/  stderr| /' "$work/err" | head -n 20 >&2
		fi
	done
done
if ((failed)); then
	log "$failed of $checked runs failed"
	exit 1
fi
log "OK: ${#scripts[@]} scripts are executable and answer --help and -h with their usage, exit 0, and start nothing"
