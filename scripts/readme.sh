#!/usr/bin/env bash
# scripts/readme.sh: the README's runnable blocks run as written against the
# quickstart, the way a newcomer runs them.
#
#   scripts/readme.sh            run every runnable block of README.md
#   scripts/readme.sh --list     print the runnable blocks; starts nothing
#   scripts/readme.sh --help     this text
#
# A runnable block is a ```sh or ```bash fence right after a marker line:
#   <!-- runnable -->                  run against scripts/dev.sh
#   <!-- runnable: --stripe test -->   run against scripts/dev.sh --stripe test
# In the README's order, the script starts the quickstart as a newcomer does
# (scripts/dev.sh with the block's arguments, in the background, as in a
# first terminal), on free loopback ports (the api's, Mailpit's SMTP and web
# UI) and one fresh DEV_DIR for the whole run, and waits until dev.sh wrote
# DEV_DIR/env. Each block then runs in a shell of its own, as in a second
# terminal at the repository root: `source DEV_DIR/env` (IDEMGATE_URL,
# IDEMGATE_TOKEN, DATABASE_URL, STRIPE_URL, TESTSTRIPE_URL, idemctl on PATH;
# see scripts/dev.sh --help), then the block with bash -euo pipefail, at most
# README_BLOCK_TIMEOUT seconds. When the next block wants other arguments,
# the quickstart is stopped and started again with them (on the same DEV_DIR,
# so the database is kept, as when a newcomer restarts dev.sh). Any block
# that exits non-zero fails the run (every block still runs); so does a
# README with no runnable block, or a marker not followed by a fence. A
# newcomer runs a block again on the same quickstart: with README_RUNS=N
# each block runs N times in a row, and a block that fails on a later run
# (it used up its order's money, reused a key, …) fails the run. A block
# may not wait with `until` or `while` (a loop that can wait forever): it
# waits with a bounded number of tries that fails with a message.
# scripts/test.sh runs this with README_RUNS=2 as its "README blocks" step.
#
# Environment:
#   README_FILE            the file (default README.md)
#   README_RUNS            runs of each block, in a row (default 1)
#   README_BLOCK_TIMEOUT   seconds per run of a block (default 180)
#   README_READY_TIMEOUT   seconds for dev.sh to be ready (default 900: the
#                          first run installs and builds)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'readme.sh: %s\n' "$*" >&2; }

list=0
case ${1:-} in
-h | --help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit 0
	;;
--list) list=1 ;;
'') ;;
*)
	log "unknown argument '$1' (scripts/readme.sh --help lists the options)"
	exit 2
	;;
esac

readme=${README_FILE:-README.md}
runs=${README_RUNS:-1}
block_timeout=${README_BLOCK_TIMEOUT:-180}
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
	log "README_RUNS must be a positive number of runs, got '$runs'"
	exit 2
fi
ready_timeout=${README_READY_TIMEOUT:-900}
[[ -f $readme ]] || { log "$readme: no such file"; exit 2; }

# ---------------------------------------------------------------------------
# The blocks: blocks[i] the code, block_args[i] dev.sh's arguments,
# block_line[i] the fence's line number.
# ---------------------------------------------------------------------------
blocks=() block_args=() block_line=()
parse_errors=0
state=text # text | marked | code
n=0
cur="" cur_args=""
while IFS= read -r line || [[ -n $line ]]; do
	n=$((n + 1))
	case $state in
	text)
		if [[ $line =~ ^\<!--\ runnable(:([^>]*))?\ *--\>$ ]]; then
			cur_args=${BASH_REMATCH[2]:-}
			cur_args=${cur_args# }
			cur_args=${cur_args% }
			state=marked
		fi
		;;
	marked)
		if [[ $line =~ ^\`\`\`(sh|bash)$ ]]; then
			state=code
			cur=""
			block_line+=("$n")
		else
			log "$readme:$n: a runnable marker must be followed by a \`\`\`sh or \`\`\`bash fence"
			parse_errors=$((parse_errors + 1))
			state=text
		fi
		;;
	code)
		if [[ $line == '```' ]]; then
			blocks+=("$cur")
			block_args+=("$cur_args")
			state=text
		else
			# A wait that can last forever: a block bounds its tries.
			# (The words in a comment, from " #" on, are prose.)
			code_part=${line%%[[:space:]]#*}
			[[ $code_part =~ ^[[:space:]]*# ]] && code_part=""
			if [[ $code_part =~ (^|[^[:alnum:]_-])(until|while)([[:space:]]|$) ]]; then
				log "$readme:$n: a runnable block may not loop with '${BASH_REMATCH[2]}' (it can wait forever); retry a bounded number of times and fail with a message"
				parse_errors=$((parse_errors + 1))
			fi
			cur+="$line"$'\n'
		fi
		;;
	esac
done <"$readme"
if [[ $state == code ]]; then
	log "$readme: the runnable block at line ${block_line[-1]} has no closing fence"
	parse_errors=$((parse_errors + 1))
fi
if ((${#blocks[@]} == 0)); then
	log "$readme has no runnable block (a <!-- runnable --> line before a \`\`\`sh fence)"
	exit 1
fi
((parse_errors == 0)) || exit 1

if ((list)); then
	for i in "${!blocks[@]}"; do
		printf '== block %d (%s:%d), against scripts/dev.sh%s\n%s' $((i + 1)) "$readme" "${block_line[i]}" \
			"${block_args[i]:+ ${block_args[i]}}" "${blocks[i]}"
	done
	exit 0
fi

# ---------------------------------------------------------------------------
# The quickstart: free ports and a fresh DEV_DIR, as scripts/test.sh's
# quickstart step gives dev.sh.
# ---------------------------------------------------------------------------
command -v timeout >/dev/null || { log "timeout (coreutils) is required"; exit 1; }
source scripts/services.sh # services_free_port
work=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-readme.XXXXXX")
dev_pid=""
dev_args=""

stop_dev() {
	[[ -n $dev_pid ]] || return 0
	kill -TERM "$dev_pid" 2>/dev/null || true
	wait "$dev_pid" 2>/dev/null || true
	dev_pid=""
}
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	local rc=$?
	set +e
	stop_dev
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

api=$(services_free_port)
smtp=$(services_free_port "$api")
ui=$(services_free_port "$api" "$smtp")
dev_dir=$work/dev
mkdir -p "$dev_dir"

# start_dev ARGS: scripts/dev.sh ARGS in the background; returns once it
# wrote DEV_DIR/env. A port that another process took between
# services_free_port and the bind ("address already in use") is not a
# failure of the quickstart: new ports are chosen and it starts again, up
# to three times.
start_dev() {
	local attempt
	for attempt in 1 2 3; do
		if start_dev_once "$1"; then
			return 0
		fi
		grep -Eq 'address already in use|is already in use' "$work/dev.$starts.out" "$dev_dir"/*.log 2>/dev/null || return 1
		stop_dev
		log "a port was taken meanwhile (attempt $attempt); choosing new ports"
		api=$(services_free_port)
		smtp=$(services_free_port "$api")
		ui=$(services_free_port "$api" "$smtp")
	done
	return 1
}

# start_dev_once ARGS: one start of scripts/dev.sh ARGS (start_dev).
start_dev_once() {
	local args=$1 out deadline
	out=$work/dev.$((++starts)).out
	log "starting the quickstart: scripts/dev.sh${args:+ $args} (DEV_DIR $dev_dir, api 127.0.0.1:$api)"
	# shellcheck disable=SC2086 # the marker's arguments, split as a shell would
	DEV_DIR=$dev_dir IDEMGATE_API_ADDR=127.0.0.1:$api DEV_MAILPIT_SMTP_ADDR=127.0.0.1:$smtp \
		DEV_MAILPIT_UI_ADDR=127.0.0.1:$ui bash scripts/dev.sh $args >"$out" 2>&1 &
	dev_pid=$!
	dev_args=$args
	deadline=$((SECONDS + ready_timeout))
	until [[ -s $dev_dir/env ]]; do
		if ! kill -0 "$dev_pid" 2>/dev/null || ((SECONDS >= deadline)); then
			log "scripts/dev.sh${args:+ $args} did not get ready; its output:"
			sed 's/^/  | /' "$out" >&2
			return 1
		fi
		sleep 0.5
	done
	log "the quickstart is ready ($(grep -c '^export' "$dev_dir/env") lines of exports in DEV_DIR/env)"
}
starts=0

failed=0
for i in "${!blocks[@]}"; do
	num=$((i + 1))
	if [[ -z $dev_pid || ${block_args[i]} != "$dev_args" ]]; then
		stop_dev
		start_dev "${block_args[i]}"
	fi
	file=$work/block-$num.sh
	printf 'source %q\n%s' "$dev_dir/env" "${blocks[i]}" >"$file"
	for ((run = 1; run <= runs; run++)); do
		what="block $num"
		((runs == 1)) || what="block $num, run $run of $runs"
		log "$what ($readme:${block_line[i]}): running"
		set +e
		timeout "$block_timeout" bash -euo pipefail "$file" >"$work/block-$num.out" 2>&1
		rc=$?
		set -e
		sed 's/^/  | /' "$work/block-$num.out" >&2
		if ((rc == 0)); then
			log "$what: PASS"
		else
			((rc == 124)) && log "$what: timed out after ${block_timeout}s"
			log "$what ($readme:${block_line[i]}): FAIL, exit $rc; the end of the api's log:"
			tail -n 15 "$dev_dir/api.log" 2>/dev/null | sed 's/^/  | /' >&2
			failed=$((failed + 1))
			break
		fi
	done
done
stop_dev
if ((failed)); then
	log "FAILED: $failed of ${#blocks[@]} runnable blocks of $readme"
	exit 1
fi
log "OK: all ${#blocks[@]} runnable blocks of $readme ran$( ((runs == 1)) || echo ", each $runs times in a row")"
