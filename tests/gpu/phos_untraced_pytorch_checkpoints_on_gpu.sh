#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# A PyTorch job that was not started traced (PHOS_TRACE=0: its CUDA goes
# to the driver as it is) is checkpointed as cuda-checkpoint and CRIU do
# it: with stop, the driver saving its device memory. PyTorch always has
# NCCL loaded; alone in its tree, the job is not refused for that.
#   1. its untraced run (no phos at all) ends, with its lines kept;
#   2. run untraced under phos run, a stop checkpoint is published while
#      it runs on;
#   3. it runs on to its end, every line equal;
#   4. killed, that image restores (eagerly: nothing of it is parked), and
#      every line it prints to its end equals the untraced run's.
b=${PHOS_BUNDLE:-gpu-bundle}
src=${PHOS_SRCDIR:-$b/..}
. "$b/share/gpu-matrix.sh"
python3 -c 'import torch' 2>/dev/null || matrix_skip 4 "needs PyTorch"
matrix_ready 4 untraced
matrix_n=4
args=(python3 "$src/examples/pytorch/train_loader.py" --workers 0 --steps "$matrix_steps" --sleep "$matrix_sleep")
if matrix_reference "${args[@]}"; then
	echo "ok 1 - PyTorch runs untraced to its end ($(grep -c '^step' "$work/ref") steps)"
else
	for i in 1 2 3 4; do echo "not ok $i - PyTorch does not run untraced"; done
	exit 1
fi
pid=$(PHOS_TRACE=0 start "$work/pid" "${args[@]}")
out=$store/run/$pid.out
if wait_line "$out" "^step $((matrix_steps / 3)) " 600 &&
	"$phos" checkpoint "$pid" stop --name stop --wait >"$work/ck" 2>&1; then
	echo "ok 2 - an untraced PyTorch job is checkpointed with stop ($(grep -E '^(stall ms|steps ms)' "$mnt/$pid/status" | tr '\n' ';'))"
else
	echo "not ok 2 - the stop checkpoint of the untraced job failed: $(tail -2 "$work/ck" | tr '\n' ' ')"
fi
wait_line "$out" '^params' 900
matrix_equal 3 "checkpointed untraced, it runs on" "$out"
off=$(stat -c %s "$out")
rpid=$("$phos" restore "$store/$pid/stop" eager 2>"$work/rs")
if [ -n "$rpid" ] && follow "$rpid"; then
	matrix_wait_end "$rpid" "$out" "$off"
	settled
	matrix_equal 4 "the untraced job's image, restored" "$out" "$off"
	kill_job "$rpid"
else
	echo "not ok 4 - the image of the untraced job did not restore: $(tail -2 "$work/rs" | tr '\n' ' ')"
fi
