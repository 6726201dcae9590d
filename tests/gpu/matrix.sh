# SPDX-License-Identifier: GPL-2.0-only
# shellcheck shell=bash
# The framework matrix: one program, run as people run it, against its own
# untraced run, line for line. Sourced (not run) by the
# tests/gpu/phos_matrix_*_on_gpu.sh tests, after they set b (the bundle)
# and src (the source tree); the bundle carries it as share/gpu-matrix.sh.
#
#   matrix NAME CMD...
#       TAP tests 1-12 of program CMD (started under `phos run --pid-ns`;
#       it prints "step N ..." lines and a "params" line, as
#       tests/gpu/frameworks/steps.py does):
#         1     its untraced run (no phos at all) ends, with its lines
#               kept;
#         2     under phos run, with no checkpoint, every line equals it;
#         3-5   a run checkpointed with stop, cow and recopy, one after the
#               other at steps a fifth, two fifths and three fifths in
#               (each leaving it running): each checkpoint is published;
#         6     that run goes on to its end with every line equal;
#         7-12  each of the three images restored lazily, then eagerly,
#               one restore at a time: every line a restored process
#               prints, to its end, equals the untraced run's.
#       Each restore prints a row for the README's table:
#       "# row: NAME PROTOCOL MODE stall=MS resumed=MS cow-waits=N/MS".
#   matrix_stop_only NAME REASON CMD...
#       for a program that uses managed memory, which phos cannot park
#       and the driver's checkpoint does not take (CUDA error 801 from
#       driver 580):
#         1     its untraced run ends;
#         2     under phos run, with no checkpoint, every line equals it;
#         3     a cow checkpoint is refused, saying REASON (a pattern);
#         4     a stop checkpoint fails, saying REASON, and publishes
#               nothing;
#         5     the run goes on to its end, every line equal.
#
# PHOS_MATRIX_STEPS and PHOS_MATRIX_SLEEP set the program's --steps and
# --sleep (150 and 0.05); PHOS_MATRIX_ONLY=run runs tests 1 and 2 alone
# (the others skip). Needs root, FUSE, a GPU and python3 with the
# framework; skips with the reason otherwise.

# shellcheck source=tests/gpu/rig.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu-rig.sh" 2>/dev/null || . "$(dirname "${BASH_SOURCE[0]}")/rig.sh"

matrix_steps=${PHOS_MATRIX_STEPS:-150}
matrix_sleep=${PHOS_MATRIX_SLEEP:-0.05}

# matrix_skip N REASON: N tests skipped, and the script ends.
matrix_skip() {
	echo "1..$1"
	for i in $(seq "$1"); do echo "ok $i # skip $2"; done
	exit 0
}

# matrix_ready N NAME: the checks every matrix test makes first; mounts
# phosfs as NAME.
matrix_ready() {
	[ "$(id -u)" = 0 ] && [ -e /dev/fuse ] || matrix_skip "$1" "needs root and FUSE"
	nvidia-smi -L >/dev/null 2>&1 || matrix_skip "$1" "no GPU"
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
	export PHOS_RUN_FLAGS=--pid-ns PYTHONUNBUFFERED=1
	echo "1..$1"
	rig_mount "$2" --criu-plugins "$b/criu-plugins" || {
		for i in $(seq "$1"); do echo "not ok $i - phosfs did not mount (bundle $b)"; done
		exit 1
	}
}

# The lines of FILE from byte OFFSET on, as train_lines gives them.
lines_from() { tail -c +$(($2 + 1)) "$1" >"$work/part"; train_lines "$work/part"; }

# matrix_wait_end PID FILE OFFSET: waits (3 minutes at most) until PID
# has printed its params line into FILE past byte OFFSET, or is gone.
matrix_wait_end() {
	for _ in $(seq 1800); do
		alive "$1" || return
		grep -q '^params' <(tail -c +$(($3 + 1)) "$2") && return
		sleep 0.1
	done
}

# matrix_equal N WHAT FILE [OFFSET]: TAP line N: every line of FILE (from
# OFFSET) is the untraced run's line of the same step, and the run
# reached its params line.
matrix_equal() {
	local n=$1 what=$2 f=$3 off=${4:-0} bad
	lines_from "$f" "$off" >"$work/got"
	bad=$(grep -vxFf "$work/ref" "$work/got" | head -3)
	if [ -s "$work/got" ] && [ -z "$bad" ] && grep -q '^params' "$work/got"; then
		echo "ok $n - $what: its $(grep -c '^step' "$work/got") step lines and its params line equal the untraced run's"
	else
		echo "not ok $n - $what: $(grep -vxFf "$work/ref" "$work/got" | wc -l) lines differ from the untraced run's"
		[ -n "$bad" ] && echo "$bad" | sed 's/^/#   got: /'
		grep -q '^params' "$work/got" || echo "#   it never reached its params line; its last lines:"
		tail -n 3 "$f" | sed 's/^/#   /'
		tail -n 3 "${f%.out}.err" 2>/dev/null | sed 's/^/#   stderr: /'
	fi
}

# matrix_reference CMD...: runs CMD without phos (no phos run, no
# tracer) to its end, 15 minutes at most; its train_lines in $work/ref.
matrix_reference() {
	timeout 900 setsid "$@" >"$work/plain.out" 2>"$work/plain.err" </dev/null
	grep -q '^params' "$work/plain.out" || {
		echo "# untraced: $(tail -3 "$work/plain.err" | tr '\n' ' ')"
		return 1
	}
	train_lines "$work/plain.out" >"$work/ref"
}

# matrix_base NAME CMD...: tests 1 and 2, the untraced run and the one
# under phos run side by side.
matrix_base() {
	local name=$1 plain
	shift
	plain=$(start "$work/pid-plain" "$@")
	if matrix_reference "$@"; then
		echo "ok 1 - $name runs untraced to its end ($(grep -c '^step' "$work/ref") steps)"
	else
		echo "not ok 1 - $name does not run untraced"
		for i in $(seq 2 "$matrix_n"); do echo "not ok $i - no untraced run to compare with"; done
		exit 1
	fi
	wait_line "$store/run/$plain.out" '^params' 900
	matrix_equal 2 "under phos run, with no checkpoint" "$store/run/$plain.out"
}

# The value of status line KEY in FILE.
status_of() { awk -F': ' -v k="$2" '$1 == k {print $2}' "$1"; }

matrix() {
	local name=$1 pid out i proto step mode image rpid off args
	shift
	matrix_n=12
	matrix_ready 12 "matrix-$name"
	args=(--steps "$matrix_steps" --sleep "$matrix_sleep")
	matrix_base "$name" "$@" "${args[@]}"
	if [ "${PHOS_MATRIX_ONLY:-}" = run ]; then
		for i in $(seq 3 12); do echo "ok $i # skip PHOS_MATRIX_ONLY=run"; done
		return 0
	fi

	pid=$(start "$work/pid" "$@" "${args[@]}")
	out=$store/run/$pid.out
	i=3
	declare -A images stalls waits
	for proto in stop cow recopy; do
		step=$((matrix_steps * (i - 2) / 5))
		if wait_line "$out" "^step $step " 600 &&
			"$phos" checkpoint "$pid" "$proto" --name "$proto" --wait >"$work/ck" 2>&1; then
			images[$proto]=$store/$pid/$proto
			# The CoW waits are the app's, counted until the copy ends.
			sleep 1
			cp "$mnt/$pid/status" "$work/st"
			stalls[$proto]=$(status_of "$work/st" "stall ms")
			waits[$proto]="$(status_of "$work/st" "cow waits")"
			echo "ok $i - a $proto checkpoint at step $step is published ($(grep -E '^(stall ms|cow waits|steps ms)' "$work/st" | tr '\n' ';'))"
		else
			echo "not ok $i - the $proto checkpoint at step $step failed: $(tail -2 "$work/ck" | tr '\n' ' ')"
			grep -E '^(error|last job)' "$mnt/$pid/status" 2>/dev/null | sed 's/^/#   /'
			# What the job said last, and whether it still runs.
			alive "$pid" || echo "#   process $pid is gone; its last words:"
			tail -n 3 "$store/run/$pid.err" 2>/dev/null | sed 's/^/#   stderr: /'
			dmesg 2>/dev/null | grep -iE 'killed process|out of memory' | tail -n 2 | sed 's/^/#   kernel: /'
		fi
		i=$((i + 1))
	done
	wait_line "$out" '^params' 900
	matrix_equal 6 "checkpointed with stop, cow and recopy, it runs on" "$out"
	i=7

	for proto in stop cow recopy; do
		for mode in lazy eager; do
			image=${images[$proto]:-}
			off=$(stat -c %s "$out")
			rpid=
			[ -n "$image" ] && rpid=$("$phos" restore "$image" "$mode" 2>"$work/rs")
			if [ -z "$rpid" ] || ! follow "$rpid"; then
				echo "not ok $i - the $proto image restored $mode did not run: $(tail -2 "$work/rs" 2>/dev/null | tr '\n' ' ')"
			else
				matrix_wait_end "$rpid" "$out" "$off"
				settled >/dev/null
				cp "$mnt/status" "$work/rst"
				grep -E '^(resumed ms|fully restored ms|on-demand waits|safety-net waits)' "$work/rst" |
					tr '\n' ' ' | sed "s/^/# $proto $mode: /"
				echo
				echo "# row: $name $proto $mode stall=${stalls[$proto]:-} resumed=$(status_of "$work/rst" "resumed ms") cow-waits=${waits[$proto]:-}"
				matrix_equal "$i" "the $proto image restored $mode" "$out" "$off"
				kill_job "$rpid"
			fi
			i=$((i + 1))
		done
	done
}

matrix_stop_only() {
	local name=$1 reason=$2 pid out
	shift 2
	matrix_n=5
	matrix_ready 5 "matrix-$name"
	local args=(--steps "$matrix_steps" --sleep "$matrix_sleep")
	matrix_base "$name" "$@" "${args[@]}"
	pid=$(start "$work/pid" "$@" "${args[@]}")
	out=$store/run/$pid.out
	wait_line "$out" "^step $((matrix_steps / 4)) " 600
	if "$phos" checkpoint "$pid" cow --wait >"$work/ck" 2>&1; then
		echo "not ok 3 - a cow checkpoint of a process that $reason was taken"
	elif grep -Eq "$reason" "$work/ck"; then
		echo "ok 3 - a cow checkpoint is refused: $(head -1 "$work/ck")"
	else
		echo "not ok 3 - a cow checkpoint failed, but did not say why: $(head -2 "$work/ck" | tr '\n' ' ')"
	fi
	if "$phos" checkpoint "$pid" stop --name stop --wait >"$work/ck" 2>&1; then
		echo "not ok 4 - a stop checkpoint of a process that uses $reason was taken: the driver would have refused it"
	elif grep -Eq "$reason" "$work/ck" && [ ! -e "$store/$pid/stop" ]; then
		echo "ok 4 - a stop checkpoint fails, publishing nothing: $(head -1 "$work/ck")"
	else
		echo "not ok 4 - the stop checkpoint failed without saying why: $(head -2 "$work/ck" | tr '\n' ' ')"
	fi
	wait_line "$out" '^params' 900
	matrix_equal 5 "it runs on" "$out"
}
