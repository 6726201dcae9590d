#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# phos run --restore-from latest --name JOB: one command line for a job
# that may have run before. A real phosfs, and examples/counter under the
# tracer on simcuda; each run is the same line, and TERM checkpoints the
# job and ends it (TERM=checkpoint-kill), as a preemption would:
#
#   1. no image of the job yet: it says so and runs the command afresh;
#   2. with an image: the job comes back from it, phos run prints its new
#      pid, its counter goes on from the checkpoint's count with its
#      device memory intact, and the next TERM checkpoints it again;
#   3. the newest image damaged: it says so, falls back to the image
#      before, and the job goes on from that one's count; phos run exits
#      with the restored job's status (it is no child of phos run);
#   4. every image damaged: it says so and runs the command afresh;
#   5. (another job, kept to 2 images) images A and B, B damaged: the
#      next run falls back to A and drops B's link, and its checkpoint C
#      leaves A and C linked, A in the store; C damaged too, the next run
#      comes back from A, not afresh;
#   6. a link planted at STORE/jobs/NAME is not followed: phos run says
#      so, and writes nothing where it leads.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/phos_run_rig.bash
. "${PHOS_SRCDIR:-$here/../..}/tests/phos_run_rig.bash"
rig_require
rig_mount

# Starts the job's one command line; its pid into $pid, phos run's $run.
start() {
	"$phos" run --name train --restore-from latest --on-signal TERM=checkpoint-kill -- "$counter" 8 \
		>"$work/pid.$1" 2>"$work/err.$1" &
	run=$!
	pid=$(started "$work/pid.$1" 30)
}

# Flips a byte in the middle of each of the image's largest files.
damage() {
	python3 - "$1" <<-'EOF'
		import os, sys
		files = [os.path.join(d, f) for d, _, fs in os.walk(sys.argv[1]) for f in fs]
		files.sort(key=os.path.getsize)
		for p in files[-2:]:
		    with open(p, "r+b") as f:
		        f.seek(os.path.getsize(p) // 2)
		        b = f.read(1)
		        f.seek(-1, 1)
		        f.write(bytes([b[0] ^ 0xFF]))
	EOF
}

# 1. Nothing to restore: a fresh start.
start 1
first=$pid
out=$store/run/$first.out
check 'grep -q "no image in $store/jobs/train: starting .* afresh" "$work/err.1" && wait_line "$out" "^count 20\$" 20' \
	"no image yet: phos run says so and runs the command afresh"
kill -TERM "$run"
wait "$run"
rc=$?
c1=$(last_count "$out")
check '[ "$rc" = 143 ] && [ "$(readlink "$store/jobs/train/latest")" = 1 ]' \
	"TERM checkpointed it and ended it (phos run: $rc); latest names image 1 (count $c1)"

# 2. The same line again: the job comes back.
start 2
check '[ "$pid" != "$first" ] && grep -q "process $pid restored from $store/$first/1" "$work/err.2"' \
	"with an image, the same line restores the job, and prints its new pid ($pid)"
check 'wait_line "$out" "^count $((c1 + 10))\$" 20 && [ "$(grep -c "MiB of device memory ready" "$out")" = 1 ]' \
	"its counter goes on from $c1, in the output it had (it did not start again)"
kill -USR1 "$run" # no action: passed on; the counter checks its device memory
check 'wait_line "$out" "^verify ok count" 20' "its device memory came back intact, and signals reach it"
kill -TERM "$run"
wait "$run"
rc=$?
c2=$(last_count "$out")
check '[ "$rc" = 143 ] && [ "$(readlink "$store/jobs/train/latest")" = 2 ] && [ "$c2" -gt "$c1" ]' \
	"the next TERM checkpoints the restored job (image 2, count $c2) and ends it (phos run: $rc)"

# 3. The newest image damaged: back to the one before.
two=$(readlink -f "$store/jobs/train/2")
damage "$two"
lines=$(wc -l <"$out")
start 3
check 'grep -q "image $two is damaged: .*; falling back to the image before it" "$work/err.3" &&
	grep -q "process $pid restored from $store/$first/1" "$work/err.3"' \
	"the newest image damaged: phos run says so, and restores the image before it"
wait_line "$out" "^count $((c1 + 20))\$" 20
next=$(tail -n +$((lines + 1)) "$out" | grep -m1 -E '^count [0-9]+$' | cut -d' ' -f2)
check '[ "${next:-0}" = $((c1 + 10)) ]' "and the job goes on from image 1's count: $c1, then ${next:-nothing}"
sed 's/^/# phos run: /' "$work/err.3"
kill -USR2 "$run" # no action: passed on; the counter dies of it
wait "$run"
rc=$?
check '[ "$rc" = 140 ] && ! alive "$pid"' \
	"phos run exits with the restored job's status, though it is no child of it (USR2: 140; $rc)"

# 4. Every image damaged: a fresh start.
damage "$(readlink -f "$store/jobs/train/1")"
start 4
check 'grep -q "no good image in $store/jobs/train: starting .* afresh" "$work/err.4" &&
	[ "$(grep -c "is damaged" "$work/err.4")" = 1 ] && wait_line "$store/run/$pid.out" "^count 10\$" 20' \
	"every image damaged (image 2's link went at 3): phos run says so, and runs the command afresh"
kill -TERM "$run"
wait "$run"

# 5. A prune after a fallback keeps the good image.
job() { # N: the job "pruned", kept to 2 images; its pid into $pid, phos run's $run
	"$phos" run --name pruned --keep 2 --restore-from latest --on-signal TERM=checkpoint-kill -- "$counter" 8 \
		>"$work/pid.p$1" 2>"$work/err.p$1" &
	run=$!
	pid=$(started "$work/pid.p$1" 30)
	wait_line "$store/run/$pid.out" "^count" 20
	sleep 0.5
}
jobs=$store/jobs/pruned
job 1
kill -TERM "$run"
wait "$run"
a=$(readlink -f "$jobs/1")
job 2
kill -TERM "$run"
wait "$run"
b=$(readlink -f "$jobs/latest")
damage "$b"
job 3
kill -TERM "$run"
wait "$run"
c=$(readlink -f "$jobs/latest")
check '[ -d "$a" ] && [ "$(readlink -f "$jobs/1")" = "$a" ] && [ "$c" != "$b" ] && [ "$c" != "$a" ] &&
	! ls -l "$jobs" | grep -q " $b\$" && grep -q "its link is dropped" "$work/err.p3"' \
	"after a fallback past a damaged image, the next checkpoint leaves the good one linked and in the store"
damage "$c"
job 4
check 'grep -q "restored from $a" "$work/err.p4"' "with the newest damaged too, the job comes back from the good one"
kill -TERM "$run"
wait "$run"

# 6. A link planted at STORE/jobs/NAME.
mkdir -p "$work/elsewhere"
ln -s "$work/elsewhere" "$store/jobs/planted"
"$phos" run --name planted --on-signal TERM=checkpoint-kill -- "$counter" 8 >"$work/pid.l" 2>"$work/err.l" &
run=$!
pid=$(started "$work/pid.l" 30)
wait_line "$store/run/$pid.out" "^count" 20
kill -TERM "$run"
wait "$run"
check '[ -z "$(ls -A "$work/elsewhere")" ] && grep -q "cannot link .* $store/jobs/planted" "$work/err.l"' \
	"a link planted at STORE/jobs/NAME is not followed; phos run says so ($(grep -m1 "cannot link" "$work/err.l"))"
done_testing
