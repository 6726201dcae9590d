#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Two CUDA processes that block on each other on the GPU
# (tests/apps/pair_app: kernel `meet` spins on a page both map until the
# peer has published its step, as a collective does). With rank 1 held on
# the host, rank 0's kernel cannot end, so neither rank can be
# checkpointed; under a real phosfs mount (--checkpoint-timeout 0.5):
#   1. rank 0 waiting in cuMemcpyDtoH: `checkpoint stop` fails within its
#      deadline and a few seconds, naming the process and the call;
#   2. let go, both ranks go on and every sum checks;
#   3. rank 0 waiting in cuStreamSynchronize: `checkpoint cow --timeout 1`
#      fails in time, saying the device work did not finish;
#   4. let go again, both go on, every sum right; nothing was published;
#   5. the pair untraced (PHOS_TRACE=0): the driver locks both at once
#      (CUcheckpointLockArgs.timeoutMs), cannot lock rank 0 in time, and
#      the checkpoint fails within the deadline; let go, both go on.
# Needs root and FUSE; one GPU.
b=${PHOS_BUNDLE:-gpu-bundle}
echo "1..5"
skip() { for i in 1 2 3 4 5; do echo "ok $i # skip $1"; done; exit 0; }
[ "$(id -u)" = 0 ] && [ -e /dev/fuse ] || skip "needs root and FUSE"
nvidia-smi -L >/dev/null 2>&1 || skip "needs a GPU"
. "$b/share/gpu-rig.sh"
rig_mount blocked --criu-plugins "$b/criu-plugins" --checkpoint-timeout 0.5 ||
	{ for i in 1 2 3 4 5; do echo "not ok $i - phosfs did not mount (bundle $b)"; done; exit 1; }
pid=$(start "$work/pid" "$b/apps/pair_app" "$b/apps/pair.cubin")
out=$store/run/$pid.out
last_step() { awk -v r="$1" '$1 == "rank" && $2 == r && $3 == "step" {n = $4} END {print n + 0}' "$out"; }
both_past() { # STEP SECONDS
	for _ in $(seq $(($2 * 10))); do
		[ "$(last_step 0)" -gt "$1" ] && [ "$(last_step 1)" -gt "$1" ] && return 0
		sleep 0.1
	done
	return 1
}
hold() { # N: holds rank 1 and waits for its Nth "holds" line
	kill -USR1 "$pid"
	for _ in $(seq 100); do
		[ "$(grep -c '^rank 1 holds' "$out")" -ge "$1" ] && { sleep 0.3; return 0; }
		sleep 0.1
	done
	return 1
}
try() { # PROTO [OPTIONS]: the answer in $work/ck, the seconds in $secs
	local t0 t1
	t0=$(now)
	"$phos" checkpoint "$pid" "$@" --wait >"$work/ck" 2>&1
	t1=$(now)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
	echo "# $* : $secs s: $(tr '\n' ' ' <"$work/ck")"
}
both_past 100 120 || echo "# pair_app did not run: $(tail -3 "$out" "$store/run/$pid.err" 2>/dev/null | tr '\n' ' ')"

hold 1
try stop
grep -q "process $pid did not park: cannot park within 500 ms: its main thread is still inside cuMemcpyDtoH" "$work/ck" &&
	awk -v s="$secs" 'BEGIN {exit !(s < 0.5 + 3)}' &&
	echo "ok 1 - with rank 1 held, a stop checkpoint fails within its 0.5 s deadline ($secs s), naming the call" ||
	echo "not ok 1 - the stop checkpoint did not fail in time with the call named ($secs s)"
s0=$(last_step 0)
kill -USR1 "$pid"
both_past $((s0 + 100)) 60 && ! grep -q WRONG "$out" &&
	echo "ok 2 - let go, both ranks go on, every sum right" || echo "not ok 2 - the ranks did not go on"

kill -USR2 "$pid"
both_past $(($(last_step 0) + 40)) 60
hold 2
try cow --timeout 1
grep -q "process $pid did not park: cannot park within 1000 ms: its device work did not finish" "$work/ck" &&
	awk -v s="$secs" 'BEGIN {exit !(s < 1 + 3)}' &&
	echo "ok 3 - in cuStreamSynchronize, a cow checkpoint fails within its own 1 s ($secs s): the device did not finish" ||
	echo "not ok 3 - the cow checkpoint did not fail in time saying the device did not finish ($secs s)"
s0=$(last_step 0)
kill -USR1 "$pid"
n=$(find "$store/$pid" -mindepth 1 -maxdepth 1 ! -name '.*' 2>/dev/null | wc -l)
both_past $((s0 + 100)) 60 && ! grep -q WRONG "$out" && [ "$n" = 0 ] &&
	echo "ok 4 - let go again, both go on, every sum right, nothing published" ||
	echo "not ok 4 - after the second attempt the ranks did not go on, or something was published ($n)"

kill -9 "$pid"
pid=$(PHOS_TRACE=0 start "$work/pid2" "$b/apps/pair_app" "$b/apps/pair.cubin")
out=$store/run/$pid.out
both_past 100 120 && hold 1
try stop
s0=$(last_step 0)
kill -USR1 "$pid"
grep -q "could not lock process $pid within 500 ms" "$work/ck" && awk -v s="$secs" 'BEGIN {exit !(s < 0.5 + 3)}' &&
	both_past $((s0 + 100)) 60 && ! grep -q WRONG "$out" &&
	echo "ok 5 - untraced, the driver cannot lock rank 0 within 0.5 s ($secs s); let go, both go on" ||
	echo "not ok 5 - untraced, the checkpoint did not fail in time at the driver lock ($secs s)"
